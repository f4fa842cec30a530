"""The demo's last row: a run whose job dead-lettered records fails, though every record was delivered."""

from __future__ import annotations

from pipelines.demo.run import StepResult, whole_run
from pipelines.quality.checks import Verdict
from pipelines.quality.report import QualityReport

STEPS = [StepResult("start", 1, 2, 2)]


def test_a_clean_run_passes() -> None:
    total = whole_run(STEPS, QualityReport("j", "run:v1", Verdict(records_expected=10, rows=10)))
    assert total.passed and total.notes == [] and total.records == 10


def test_dead_letters_fail_the_demo_with_a_note_though_the_checks_account_for_them() -> None:
    """The Kinesis demo's producer once wrote no 'amount': every record was a dead letter and the demo passed."""
    report = QualityReport("j", "run:v1", Verdict(records_expected=10, rows=0, dead_letters=10))
    assert report.success, "the checks alone count a dead letter as delivered"
    total = whole_run(STEPS, report)
    assert not total.passed
    assert total.notes == ["10 records went to the dead-letter table: the demo's job failed them"]
