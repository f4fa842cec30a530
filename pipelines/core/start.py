"""Where a new job's first model reads each input partition from: the job YAML's ``start``.

Three forms, named as Kafka's and Spark's users know them: ``earliest`` (every
record there, ``auto.offset.reset=earliest``), ``latest`` (only records
written after ``job create``) and a point in time, an ISO-8601 timestamp with
its zone (the first record at or after it in each partition: Kafka's
``offsetsForTimes``, Spark's ``startingTimestamp``, Flink's
``OffsetsInitializer.timestamp``). Each is resolved once, at ``job create``,
into version 1's start checkpoints (docs/design.md, "Checkpoints and their migration").
Pure: no system is asked here.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from pipelines.core.limits import shown
from pipelines.errors import ConfigError, did_you_mean

EARLIEST = "earliest"
LATEST = "latest"
WORDS = (EARLIEST, LATEST)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST = "9999-12-31T23:59:59Z"
"""The last second Python's ``datetime`` holds in UTC; a later instant (the same clock time west of UTC) has no form."""
HINT = "earliest, latest, or a time with its zone such as 2026-11-27T08:00:00Z"


def parse_start(value: object) -> str:
    """The canonical form of a ``start`` value: a word, or the time in UTC to the millisecond (``...T08:00:00.000Z``).

    A YAML loader hands an unquoted timestamp over as a ``datetime`` (and a bare
    date as a ``date``): both are taken, as long as the zone is said, because a
    time without one means a different instant on every host that reads it.
    """
    if isinstance(value, str) and value.strip() in WORDS:
        return value.strip()
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, date):
        raise ConfigError(
            f"start: {value.isoformat()} is a date, not a time: add one and its zone, such as "
            f"{value.isoformat()}T00:00:00Z"
        )
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"start: {shown(text)}{did_you_mean(text, WORDS)} is not a start: give {HINT}") from None
    else:
        raise ConfigError(f"start: {shown(value)} is not a start: give {HINT}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ConfigError(
            f"start: {when.isoformat()} has no time zone, so each host would read it in its own: add one (Z for UTC)"
        )
    if when < EPOCH:
        raise ConfigError(f"start: {when.isoformat()} is before 1970, where no record's timestamp can be")
    try:
        return canonical(when)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
        raise ConfigError(
            f"start: {when.isoformat()} is after {LAST}, the last time a timestamp can hold: give an earlier one"
        ) from None


def start_time_ms(start: str) -> int | None:
    """The time of a canonical ``start`` in milliseconds since the epoch, or ``None`` for the two words."""
    if start in WORDS:
        return None
    return (datetime.fromisoformat(parse_start(start)) - EPOCH) // timedelta(milliseconds=1)  # exact, no float


def canonical(when: datetime) -> str:
    """An instant as a job's ``start`` keeps it: UTC, to the millisecond (``2026-11-27T08:00:00.000Z``)."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def time_of_ms(ms: int) -> str:
    """The canonical form of a time in milliseconds since the epoch (integers all the way: no float rounding)."""
    return canonical(EPOCH + timedelta(milliseconds=ms))
