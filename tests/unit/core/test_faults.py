"""The fault ledger: Spark's failed task attempts and lost executors, each charged to one batch exactly once."""

from __future__ import annotations

from pipelines.core.faults import FaultLedger, Faults, JobSeen, fault_summary


def test_a_running_jobs_failures_wait_for_its_end_and_count_once() -> None:
    ledger = FaultLedger(frozenset({"driver:1", "w1:7", "w2:7"}))
    assert ledger.jobs_to_ask([3]) == [3]
    running = ledger.settle({3: JobSeen(False, {5: 1})}, {"driver:1", "w2:7"}, [3])
    assert running == Faults(tasks_failed=0, executors_lost=1)  # the executor is gone now; the job not yet ended
    assert ledger.jobs_to_ask([3, 4]) == [3, 4]
    ended = ledger.settle({3: JobSeen(True, {5: 2}), 4: JobSeen(False, {6: 0})}, {"driver:1", "w2:7"}, [3, 4])
    assert ended == Faults(tasks_failed=2, executors_lost=0)
    assert ledger.jobs_to_ask([3, 4]) == [4]  # an ended job is not asked again
    assert not ledger.settle({4: JobSeen(True, {6: 0})}, {"driver:1", "w2:7"}, [3, 4])


def test_a_replacement_executor_hides_no_loss_and_a_new_one_is_no_loss() -> None:
    ledger = FaultLedger(frozenset({"driver:1", "w1:7"}))
    assert ledger.settle({}, {"driver:1", "w1:9"}, []) == Faults(executors_lost=1)  # w1 came back on a new port
    assert ledger.settle({}, {"driver:1", "w1:9", "w2:7"}, []) == Faults()


def test_a_stage_shared_by_two_jobs_is_counted_once() -> None:
    ledger = FaultLedger()
    assert ledger.settle({1: JobSeen(True, {10: 3})}, (), [1]).tasks_failed == 3
    assert ledger.settle({2: JobSeen(True, {10: 3, 11: 1})}, (), [1, 2]).tasks_failed == 1


def test_the_ledger_forgets_jobs_spark_no_longer_retains() -> None:
    ledger = FaultLedger()
    for job in range(5):
        ledger.settle({job: JobSeen(True, {job: 0})}, (), range(max(0, job - 1), job + 1))
    assert set(ledger.ended) == {3, 4} and set(ledger.counted) <= {3, 4}


def test_the_summary_names_what_was_lost_and_nothing_for_a_clean_batch() -> None:
    assert fault_summary(7, 3, 1) == "batch 7: 3 tasks retried, 1 executor lost"
    assert fault_summary(7, 1, 0) == "batch 7: 1 task retried"
    assert fault_summary(7, 0, 2) == "batch 7: 2 executors lost"
    assert fault_summary(7, 0, 0) is None
