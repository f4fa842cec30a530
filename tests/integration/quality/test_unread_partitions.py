"""Records in partitions the active model does not read fail the whole run's proof, named, with what to do."""

from __future__ import annotations

import pytest

from pipelines.quality.report import run_quality
from pipelines.quality.verify import verify_job
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from ..runtime.jobs import SeqProducer, job

pytestmark = pytest.mark.integration


def test_an_expansion_not_yet_absorbed_fails_the_whole_run_verdict_naming_the_unread_partitions(
    spark, home: Home
) -> None:
    log = DeltaLog(home.streams)
    producer = SeqProducer(log, "events", 2, keys=12)
    producer.produce(120)
    config = job(home, "unabsorbed", 2, max_records=200)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert verify_job(home, config.name, sequence="seq").ok, "everything v1 reads is accounted for"

    log.expand("events", 4)
    producer.produce(120)  # some keys now land in partitions 2 and 3, which v1 does not read
    ends = log.end_offsets("events")
    waiting = ends[2] + ends[3]
    assert waiting > 0

    verdict = verify_job(home, config.name, sequence="seq")
    assert not verdict.ok and verdict.unread == waiting and verdict.lost == 0
    assert f"events/2 ({ends[2]} records), events/3 ({ends[3]} records) not read by model v1" in verdict.summary()
    assert "`pipelines watch --apply`" in verdict.summary()

    report = run_quality(home, config.name, sequence="seq", docs=False)
    assert not report.success
    check = next(r for r in report.results if r["check"] == "partitions_read")
    assert (check["success"], check["observed"]) == (False, waiting)
    assert all(r["success"] for r in report.results if r["check"] != "partitions_read"), "nothing else is wrong"
