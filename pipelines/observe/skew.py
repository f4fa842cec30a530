"""Whether a virtual task's load is skewed beyond what chance gives for the sample: a hot key bucket.

Hashing spreads *keys* over buckets, not records. With 100 keys over 16
buckets, a bucket holds 6 keys on average and 12 now and then: twice the
records of its siblings with every key equally busy. That is the luck of the
hash on a small key set (a larger factor evens it out), not a hot key, and
flagging it on the share of records alone raised false alarms (3 of 16 tasks
"skewed 1.9×" after one 4,000-record batch of 100 uniformly random keys).

So the question asked is the one a hot key answers: does a task get more
records than its keys account for? Each task reports the distinct keys it saw
per batch (``keys_in``); if every key were equally busy, task i would get a
share ``p = keys_i / keys`` of the ``n`` records, its count binomial
``(n, p)``. A task is flagged when both hold:

* practically: it got at least ``SKEW_HIGHLIGHT`` times the records its keys
  account for, and
* statistically: that excess is beyond chance, a one-sided z test of the
  binomial count (the normal approximation; only tasks expecting at least
  ``MIN_EXPECTED`` records are judged) at ``ALPHA`` for the whole table
  (Bonferroni: ``ALPHA / tasks`` per task), so a table of 1,024 tasks raises
  no more false alarms than a table of 2.

Rows without key counts (drivers older than the ``keys_in`` metric) are judged
against the fair share ``1 / tasks``, the same test with ``p`` equal for all:
that flags hash luck too, and says so (``basis == "records"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

SKEW_HIGHLIGHT = 1.5
ALPHA = 0.001
MIN_EXPECTED = 10.0


@dataclass(frozen=True)
class Skew:
    """One task's records against what its keys (or a fair share) account for."""

    expected: float  # records the task would get if every key were equally busy
    ratio: float | None  # records / expected
    z: float | None  # the excess in standard deviations of the binomial count
    skewed: bool
    basis: str  # "keys": judged per key; "records": no key counts, judged against the fair share


def critical_z(tasks: int, alpha: float = ALPHA) -> float:
    """The one-sided z a single task must reach so that the whole table's false-alarm rate is ``alpha``."""
    return NormalDist().inv_cdf(1.0 - alpha / max(1, tasks))


def judge(records: Sequence[int], keys: Sequence[int] | None = None) -> list[Skew]:
    """Each task's skew verdict, in the order given; ``keys`` are the distinct keys each task saw, if known."""
    total = sum(records)
    tasks = len(records)
    counted = list(keys) if keys is not None and len(keys) == tasks and sum(keys) > 0 else None
    basis = "keys" if counted is not None else "records"
    limit = critical_z(tasks)
    result = []
    for i, observed in enumerate(records):
        p = counted[i] / sum(counted) if counted is not None else 1.0 / tasks
        expected = total * p
        if expected <= 0 or tasks < 2:
            result.append(Skew(expected, None, None, False, basis))
            continue
        ratio = observed / expected
        spread = math.sqrt(total * p * (1.0 - p))
        z = (observed - expected) / spread if spread > 0 else 0.0
        skewed = expected >= MIN_EXPECTED and ratio >= SKEW_HIGHLIGHT and z >= limit
        result.append(Skew(expected, ratio, z, skewed, basis))
    return result
