"""A job's micro-batches over time, from the ``metrics`` table's rows, and its scaling steps as markers.

Pure: plain rows in (mappings with the table's columns: ``model_version``,
``batch_id``, ``task``, ``metric``, ``value``, ``at``), points and series out;
no Spark, Delta or pandas, so it is tested fast and the page, the JSON API and
the CLI compute the same figures.

What a point is. One committed micro-batch of one model version (batch ids
restart with every version: each has its own Spark checkpoint), at the time
its metrics were committed. A batch Spark replays after a crash commits its
metrics again under the same id: the latest row of each (version, batch,
task, metric) counts, so a replay never counts records twice.

How the figures are defined (each one place, here):

* **records/s in and out**: the batch's records (summed over its virtual
  tasks) over its duration (``batch_duration_s``, Spark's
  ``durationMs.triggerExecution``, written by the driver), as Spark's
  ``processedRowsPerSecond`` is defined (Spark's own counts the source's
  rows, one per virtual task: records never cross the JVM); without a duration row (a driver older than
  that row, or a batch whose driver died before reporting it), over the time
  since the version's previous batch.
* **lag**: records behind the inputs' ends after the batch, summed over the
  ``lag_records`` rows (one per partition the system can count); where no
  partition could be counted (Kinesis: ``records_between`` answers None) the
  lag is time: the largest ``input.millis_behind_latest`` a task saw; with
  neither it is unknown (None), never 0.
* **records fetched vs needed**: ``records_fetched`` (read from the input
  system) against ``records_in`` (records of the tasks' key buckets); above
  1 means a partition was read more than once.
* **micro-batch duration**: ``batch_duration_s``.
* **Spark faults**: ``tasks_failed`` (task attempts Spark retried) and
  ``executors_lost`` (executors gone while the batch ran), job-wide rows the
  driver writes only when not 0 (``pipelines.core.faults``); a plot only
  when some batch in the window had one.

Markers: every scaling event (rescale, partition expansion, Kinesis reshard)
at its start, spanning to its end, labelled with its factor step or new
partition counts and its downtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from pipelines.core.faults import EXECUTORS_LOST, TASKS_FAILED, fault_summary
from pipelines.core.metric_names import (
    DURATION,
    KEYS,
    LAG,
    LIFECYCLE,
    OUTAGE_BACK,
    OUTAGE_DOWN,
    TASK_COUNTS,
    TASK_TIMES,
    TIME_BEHIND,
)

__all__ = [
    "DURATION",
    "KEYS",
    "LAG",
    "LIFECYCLE",
    "OUTAGE_BACK",
    "OUTAGE_DOWN",
    "TASK_COUNTS",
    "TASK_TIMES",
    "TIME_BEHIND",
]

METRICS_READ = (
    *TASK_COUNTS,
    *TASK_TIMES,
    LAG,
    KEYS,
    TIME_BEHIND,
    DURATION,
    "batch_replayed",
    "task_count",
    "input_unavailable",
    OUTAGE_DOWN,
    OUTAGE_BACK,
    TASKS_FAILED,
    EXECUTORS_LOST,
)
"""The metric names the operator's view reads (``Metrics.read(metrics=...)``): nothing else is loaded."""

RESCALE = "rescale"
EXPANSION = "partition expansion"


def epoch(value: Any) -> float:
    """Seconds since the epoch of a datetime, a pandas Timestamp, or a number already in seconds."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime) or hasattr(value, "timestamp"):
        return float(value.timestamp())
    raise TypeError(f"not a time: {value!r}")


@dataclass(frozen=True)
class BatchPoint:
    """One committed micro-batch of one model version."""

    version: int
    batch: int
    at: float  # when its metrics were committed (epoch seconds)
    records_in: int
    records_out: int
    records_fetched: int
    bytes_fetched: int
    dead_letters: int
    tasks: int | None  # virtual tasks of the model that ran it
    duration_s: float | None  # Spark's triggerExecution; None when the driver did not report it
    elapsed_s: float | None  # duration_s, else the time since the version's previous batch
    lag_records: int | None  # None: no partition could be counted
    lag_s: float | None  # time behind, where the input reports it
    replayed: bool
    unavailable: tuple[str, ...]  # inputs that did not answer after this batch
    tasks_failed: int = 0  # Spark task attempts that failed (and were retried) in this batch
    executors_lost: int = 0  # executors that went away while it ran

    @property
    def faults(self) -> str | None:
        """``batch 7: 3 tasks retried, 1 executor lost``, or None."""
        return fault_summary(self.batch, self.tasks_failed, self.executors_lost)

    @property
    def rate_in(self) -> float | None:
        return _rate(self.records_in, self.elapsed_s)

    @property
    def rate_out(self) -> float | None:
        return _rate(self.records_out, self.elapsed_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "unavailable": list(self.unavailable),
            "rate_in": self.rate_in,
            "rate_out": self.rate_out,
            "faults": self.faults,
        }


def _rate(records: int, seconds: float | None) -> float | None:
    return records / seconds if seconds else None


def latest_values(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[int, int, str | None, str], tuple[float, float]]:
    """The latest ``(at, value)`` of every (version, batch, task, metric): a replayed batch's rows replace its first."""
    latest: dict[tuple[int, int, str | None, str], tuple[float, float]] = {}
    for row in rows:
        name = row["metric"]
        if name in LIFECYCLE:
            continue
        task = row.get("task")
        key = (int(row["model_version"]), int(row["batch_id"]), task if isinstance(task, str) else None, name)
        at = epoch(row["at"])
        seen = latest.get(key)
        if seen is None or at >= seen[0]:
            latest[key] = (at, float(row["value"]))
    return latest


def batches(rows: Iterable[Mapping[str, Any]]) -> list[BatchPoint]:
    """Every committed micro-batch in ``rows``, oldest first (by commit time, then version and batch)."""
    grouped: dict[tuple[int, int], dict[tuple[str | None, str], tuple[float, float]]] = {}
    for (version, batch, task, name), seen in latest_values(rows).items():
        grouped.setdefault((version, batch), {})[(task, name)] = seen
    drafts = []
    for (version, batch), values in grouped.items():
        committed = [at for (_, name), (at, _) in values.items() if name != DURATION]
        if not committed:
            continue  # only the driver's duration: a batch the sink never committed
        drafts.append((max(committed), version, batch, values))
    drafts.sort(key=lambda d: (d[0], d[1], d[2]))
    points: list[BatchPoint] = []
    previous: dict[int, float] = {}
    for at, version, batch, values in drafts:

        def total(name: str, values: Mapping[tuple[str | None, str], tuple[float, float]] = values) -> float:
            return sum(v for (_, n), (_, v) in values.items() if n == name)

        def job_wide(name: str, values: Mapping[tuple[str | None, str], tuple[float, float]] = values) -> float | None:
            seen = values.get((None, name))
            return None if seen is None else seen[1]

        lags = [v for (_, n), (_, v) in values.items() if n == LAG]
        behind = [v for (_, n), (_, v) in values.items() if n == TIME_BEHIND]
        duration = job_wide(DURATION)
        elapsed = duration if duration else (at - previous[version] if version in previous else None)
        tasks = job_wide("task_count")
        points.append(
            BatchPoint(
                version=version,
                batch=batch,
                at=at,
                records_in=int(total("records_in")),
                records_out=int(total("records_out")),
                records_fetched=int(total("records_fetched")),
                bytes_fetched=int(total("bytes_fetched")),
                dead_letters=int(total("dead_letters")),
                tasks=int(tasks) if tasks else None,
                duration_s=duration,
                elapsed_s=elapsed if elapsed and elapsed > 0 else None,
                lag_records=int(sum(lags)) if lags else None,
                lag_s=max(behind) / 1000.0 if behind else None,
                replayed=bool(job_wide("batch_replayed")),
                unavailable=tuple(sorted(str(t) for (t, n) in values if n == "input_unavailable")),
                tasks_failed=int(job_wide(TASKS_FAILED) or 0),
                executors_lost=int(job_wide(EXECUTORS_LOST) or 0),
            )
        )
        previous[version] = at
    return points


# ---------------------------------------------------------------------------------------------------- series


@dataclass(frozen=True)
class Series:
    """One line of a plot: ``(epoch seconds, value)`` points, oldest first."""

    name: str
    points: tuple[tuple[float, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "points": [list(p) for p in self.points]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Series:
        return cls(str(raw["name"]), tuple((float(t), float(v)) for t, v in raw["points"]))


@dataclass(frozen=True)
class Chart:
    """One plot: its series share a unit; ``note`` says why it has none (e.g. lag the system cannot count)."""

    key: str
    title: str
    unit: str
    series: tuple[Series, ...]
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "unit": self.unit,
            "series": [s.to_dict() for s in self.series],
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Chart:
        series = tuple(Series.from_dict(s) for s in raw["series"])
        return cls(str(raw["key"]), str(raw["title"]), str(raw["unit"]), series, raw.get("note"))


def _series(name: str, points: Iterable[BatchPoint], value: Any) -> Series:
    return Series(name, tuple((p.at, float(v)) for p in points if (v := value(p)) is not None))


def _chart(
    points: list[BatchPoint], key: str, title: str, unit: str, lines: Mapping[str, Any], note: str | None = None
) -> Chart:
    """A chart of one line per ``lines`` entry: its name, and what it reads of each batch (None: no point)."""
    return Chart(key, title, unit, tuple(_series(name, points, value) for name, value in lines.items()), note)


def charts(points: list[BatchPoint]) -> list[Chart]:
    """The four plots of the operator's view, over the same batches."""
    counted = any(p.lag_records is not None for p in points)
    timed = any(p.lag_s is not None for p in points)
    lag_note = None
    if points and not counted and not timed:
        lag_note = (
            "unknown: no input could count the records behind (records_between answered None) "
            "and none reported a time behind"
        )
    result = [
        _chart(
            points, "throughput", "Throughput", "records/s", {"in": lambda p: p.rate_in, "out": lambda p: p.rate_out}
        ),
        _chart(
            points, "lag", "Lag", "records", {"records behind": lambda p: p.lag_records} if counted else {}, lag_note
        ),
    ]
    if timed:
        result.append(_chart(points, "time_lag", "Time behind", "s", {"seconds behind": lambda p: p.lag_s}))
    duration_note = (
        None
        if any(p.duration_s is not None for p in points) or not points
        else f"no {DURATION} rows: the driver that ran these batches did not report durations"
    )
    result += [
        _chart(
            points,
            "fetch",
            "Records fetched vs needed",
            "records/batch",
            {"fetched": lambda p: p.records_fetched, "needed": lambda p: p.records_in},
        ),
        _chart(points, "duration", "Micro-batch duration", "s", {"duration": lambda p: p.duration_s}, duration_note),
    ]
    if any(p.tasks_failed or p.executors_lost for p in points):
        # a plot only for a window in which Spark lost something: the usual page stays as it is
        lines = {"tasks retried": lambda p: p.tasks_failed, "executors lost": lambda p: p.executors_lost}
        result.append(_chart(points, "faults", "Spark faults", "per batch", lines))
    return result


def fault_notes(points: Iterable[BatchPoint], limit: int = 10) -> list[str]:
    """The newest ``limit`` batches that lost tasks or executors, oldest first (``v3 batch 7: 2 tasks retried``)."""
    notes = [f"v{p.version} {p.faults}" for p in points if p.faults]
    return notes[-limit:]


# ---------------------------------------------------------------------------------------------------- markers


@dataclass(frozen=True)
class Marker:
    """A scaling step or an input outage on the time axis: from its start to its end (None while it lasts)."""

    at: float
    until: float | None
    kind: str  # "rescale", "expansion", "reshard", or "outage" (an input that stopped answering)
    label: str
    event_id: str
    status: str
    from_factor: int | None
    to_factor: int | None
    partitions: Mapping[str, int]
    downtime_s: float | None
    mode: str | None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "partitions": dict(self.partitions)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Marker:
        values: dict[str, Any] = {f.name: raw.get(f.name) for f in fields(cls)}
        return cls(**values)


def marker(event: Mapping[str, Any]) -> Marker:
    """One scaling event (``ScalingEvent`` fields, ``details`` a mapping) as a marker."""
    details = dict(event.get("details") or {})
    partitions = {str(k): int(v) for k, v in (details.get("partitions") or {}).items()}
    if event["kind"] == RESCALE:
        kind = "rescale"
        step = f"×{_dash(event.get('from_factor'))}→×{_dash(event.get('to_factor'))}"
    else:  # a partition change: Kinesis inputs are resharded, the others expanded
        kind = "reshard" if any(k.startswith("kinesis.") for k in partitions) else "expansion"
        step = "→ " + ", ".join(f"{n} partitions" for _, n in sorted(partitions.items())) if partitions else ""
    downtime = details.get("downtime_s")
    label = f"{kind} {step}".strip()
    if downtime is not None:
        label += f" · down {float(downtime):.1f} s"
    elif details.get("mode") == "cold":
        label += " · cold (no driver ran)"
    if str(event.get("status")) in ("failed", "dq failed", "rolled back"):
        label += f" · {event['status']}"
    finished = event.get("finished_at")
    return Marker(
        at=epoch(event["started_at"]),
        until=epoch(finished) if finished is not None else None,
        kind=kind,
        label=label,
        event_id=str(event["event_id"]),
        status=str(event.get("status")),
        from_factor=event.get("from_factor"),
        to_factor=event.get("to_factor"),
        partitions=partitions,
        downtime_s=float(downtime) if downtime is not None else None,
        mode=details.get("mode"),
    )


def markers(events: Iterable[Mapping[str, Any]], since: float | None = None) -> list[Marker]:
    """The events that overlap ``[since, ...)``, oldest first."""
    result = [marker(e) for e in events]
    if since is not None:
        result = [m for m in result if m.at >= since or m.until is None or m.until >= since]
    return sorted(result, key=lambda m: (m.at, m.event_id))


def outage_markers(rows: Iterable[Mapping[str, Any]]) -> list[Marker]:
    """Input outages the source reported, as markers from when it began to when the input answered again.

    ``input_unavailable_s`` rows carry how long the input had been down when
    reported (so ``at - value`` is when it went down); the next
    ``input_recovered_s`` row of the same model version ends it. An outage
    with no end yet is open (``until`` None).
    """
    result: list[Marker] = []
    open_at: dict[int, float] = {}
    for row in sorted(rows, key=lambda r: epoch(r["at"])):
        if row["metric"] not in (OUTAGE_DOWN, OUTAGE_BACK):
            continue
        version, at, value = int(row["model_version"]), epoch(row["at"]), float(row["value"])
        if row["metric"] == OUTAGE_DOWN:
            open_at.setdefault(version, at - value)
            continue
        began = open_at.pop(version, at - value)
        result.append(_outage(version, began, at, f"input unavailable · {value:.1f} s"))
    result += [_outage(v, began, None, "input unavailable · still down") for v, began in open_at.items()]
    return sorted(result, key=lambda m: (m.at, m.event_id))


def _outage(version: int, began: float, until: float | None, label: str) -> Marker:
    return Marker(
        at=began,
        until=until,
        kind="outage",
        label=label,
        event_id=f"outage-v{version}-{began:.3f}",
        status="open" if until is None else "ended",
        from_factor=None,
        to_factor=None,
        partitions={},
        downtime_s=None if until is None else until - began,
        mode=None,
    )


def _dash(value: Any) -> str:
    return "?" if value is None else str(value)
