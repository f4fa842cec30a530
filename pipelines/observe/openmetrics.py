"""A job's signals as OpenMetrics, for Prometheus and Grafana users to alert on: a job falling behind, a driver down.

Pure: :class:`JobSignals` (read by ``observe.signals``) to metric families
(``prometheus_client``'s, so the text is the exposition format Prometheus
parses, content negotiation included when served). One sample per job, labelled
``job``; a signal the job cannot give (no batch yet, an input that does not
count the records behind) is left out rather than sent as 0, so an alert on
``pipelines_job_lag_records > N`` never fires on a figure nobody measured.
The metric names and what to alert on: docs/operations.md, "Metrics for
Prometheus".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

PREFIX = "pipelines_job_"


@dataclass(frozen=True)
class JobSignals:
    """What an operator alerts on for one job, as of one read of the home (None: not known)."""

    job: str
    model_version: int
    elasticity_factor: int
    virtual_tasks: int
    driver_up: bool  # a driver of the job beats in the drivers table
    driver_expected: bool  # the job is continuous: a driver should beat
    scaling: bool  # a scaling operation holds the job's lock
    lag_records: int | None = None  # behind the inputs' ends after the last batch
    lag_seconds: float | None = None  # time behind, where the input reports it
    records_per_second: float | None = None  # records in, over the last minute of batches
    last_batch_at: float | None = None  # epoch seconds (the store's clock) of the last committed batch
    last_switch_downtime_s: float | None = None  # the last scaling step's measured downtime
    last_switch_at: float | None = None  # when that step finished
    error: str | None = None  # why the job could not be read (its other signals are then left out)


GAUGES: tuple[tuple[str, str, Callable[[JobSignals], float | int | bool | None]], ...] = (
    ("model_version", "The job's active model version", lambda s: s.model_version),
    ("elasticity_factor", "Key buckets per input partition of the active model", lambda s: s.elasticity_factor),
    ("virtual_tasks", "Virtual tasks of the active model", lambda s: s.virtual_tasks),
    ("driver_up", "1 while a driver of the job beats, else 0", lambda s: s.driver_up),
    ("driver_expected", "1 for a continuous job, whose driver should beat", lambda s: s.driver_expected),
    ("scaling", "1 while a scaling operation holds the job's lock", lambda s: s.scaling),
    ("lag_records", "Records behind the inputs' ends after the last batch", lambda s: s.lag_records),
    ("lag_seconds", "Seconds behind, where the input reports it", lambda s: s.lag_seconds),
    ("input_records_per_second", "Records read per second over the last minute", lambda s: s.records_per_second),
    ("last_batch_timestamp_seconds", "When the last batch committed (Unix time)", lambda s: s.last_batch_at),
    ("last_switch_downtime_seconds", "Downtime of the last scaling step", lambda s: s.last_switch_downtime_s),
    ("last_switch_timestamp_seconds", "When the last scaling step finished (Unix time)", lambda s: s.last_switch_at),
)


def families(signals: Sequence[JobSignals]) -> list[Metric]:
    """One gauge family per signal, one sample per job that has it; plus which jobs could not be read."""
    result: list[Metric] = []
    for name, documentation, value in GAUGES:
        family = GaugeMetricFamily(PREFIX + name, documentation, labels=["job"])
        for s in signals:
            v = None if s.error is not None else value(s)
            if v is not None:
                family.add_metric([s.job], float(v))
        result.append(family)
    failed = GaugeMetricFamily(PREFIX + "read_error", "1 when the job's signals could not be read", labels=["job"])
    for s in signals:
        failed.add_metric([s.job], 1.0 if s.error is not None else 0.0)
    result.append(failed)
    return result


class SignalsCollector(Collector):
    """Reads the signals afresh on every scrape (``read``), so a served endpoint is as current as the home."""

    def __init__(self, read: Callable[[], Sequence[JobSignals]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield from families(self._read())


def registry(read: Callable[[], Sequence[JobSignals]]) -> CollectorRegistry:
    """A registry of the signals alone (no process or platform metrics of this Python: they are not the job's)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SignalsCollector(read))
    return reg


def exposition(signals: Sequence[JobSignals]) -> str:
    """The OpenMetrics text of ``signals``, ending with ``# EOF``."""
    text: bytes = generate_latest(registry(lambda: signals))  # type: ignore[no-untyped-call]  # untyped upstream
    return text.decode()
