"""Spark's failed task attempts and lost executors, counted once each and charged to a micro-batch.

A worker host that dies mid-batch costs the batch in flight its tasks on
that host: Spark retries them elsewhere and the batch ends late, but the
sink commits it like any other, so nothing in the job's own rows says it
happened. The driver asks Spark's status tracker each time a batch is
reported (``pipelines.runtime.driver.SparkFaults``) and hands what it saw to a
``FaultLedger``, which says what is new since the last look:

* **tasks failed**: failed task attempts (an executor lost under a running
  task counts, as in Spark's UI) of the query's jobs, charged once the job
  has ended, each stage's count once (a stage's count grows while it runs);
* **executors lost**: executors present at the previous look and gone now
  (a replacement registered meanwhile has another id: it hides no loss).

A job ends before the batch that ran it is reported, so its failures are
charged to that batch, or to the next when the driver's look came after that
one ended too (a look every 0.25 s, batches that lose a host last seconds).
Pure: plain numbers in, counts out; the Spark calls are the driver's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TASKS_FAILED = "tasks_failed"
"""Per batch (job-wide row, written only when > 0): failed task attempts of the batch's Spark jobs."""
EXECUTORS_LOST = "executors_lost"
"""Per batch (job-wide row, written only when > 0): executors that went away while it ran (or since the last)."""


@dataclass(frozen=True)
class JobSeen:
    """One Spark job as the status tracker showed it: whether it ended, and each stage's failed task count."""

    ended: bool
    failed_per_stage: Mapping[int, int]


@dataclass(frozen=True)
class Faults:
    tasks_failed: int = 0
    executors_lost: int = 0

    def __bool__(self) -> bool:
        return bool(self.tasks_failed or self.executors_lost)


@dataclass
class FaultLedger:
    """What was already charged: ended jobs, each stage's failed count so far, the executors last seen."""

    executors: frozenset[str] = frozenset()
    ended: dict[int, frozenset[int]] = field(default_factory=dict)  # job -> its stages
    counted: dict[int, int] = field(default_factory=dict)

    def jobs_to_ask(self, job_ids: Iterable[int]) -> list[int]:
        """The query's jobs not yet charged (running ones are asked again at the next look)."""
        return sorted(set(job_ids) - self.ended.keys())

    def settle(self, jobs: Mapping[int, JobSeen], executors: Iterable[str], known_jobs: Iterable[int]) -> Faults:
        """The failures of the jobs that ended since the last look, and the executors gone since then.

        ``known_jobs`` are the job ids Spark still retains for the query: the
        ledger forgets the rest, so it stays as small as Spark's own history.
        """
        failed = 0
        for job_id, seen in sorted(jobs.items()):
            if not seen.ended:
                continue
            for stage, count in seen.failed_per_stage.items():
                before = self.counted.get(stage, 0)
                if count > before:  # a stage shared by two jobs (a skipped one) is counted once
                    failed += count - before
                    self.counted[stage] = count
            self.ended[job_id] = frozenset(seen.failed_per_stage)
        now = frozenset(executors)
        lost = len(self.executors - now)
        self.executors = now
        retained = set(known_jobs)
        self.ended = {j: stages for j, stages in self.ended.items() if j in retained}
        stages = {s for j, seen in jobs.items() if j in retained for s in seen.failed_per_stage}
        stages.update(s for job_stages in self.ended.values() for s in job_stages)
        self.counted = {s: n for s, n in self.counted.items() if s in stages}
        return Faults(failed, lost)


def fault_summary(batch: int, tasks_failed: int, executors_lost: int) -> str | None:
    """``batch 7: 3 tasks retried, 1 executor lost``; None for a batch without either."""
    parts = []
    if tasks_failed:
        parts.append(f"{tasks_failed} task{'s' if tasks_failed != 1 else ''} retried")
    if executors_lost:
        parts.append(f"{executors_lost} executor{'s' if executors_lost != 1 else ''} lost")
    return f"batch {batch}: {', '.join(parts)}" if parts else None
