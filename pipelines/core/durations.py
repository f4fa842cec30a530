"""Durations, one grammar for every place a person writes one: a job's YAML (a trigger interval, a store's
``valid_for``, a state's ``ttl``), the CLI's ages and retentions, and the DAGs' params.

Short units (``500ms``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w``), the unit words of Spark's intervals (``1
second``, ``500 milliseconds``, ``2 minutes``, ``interval 1 hour``, in any case), or a bare number of seconds.
A trigger interval is handed to Spark in milliseconds (``spark_interval``), so Spark never parses what was written.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from pipelines.core.limits import shown
from pipelines.errors import ConfigError

_UNITS: dict[str, float] = {
    "milliseconds": 0.001,
    "millisecond": 0.001,
    "ms": 0.001,
    "seconds": 1,
    "second": 1,
    "s": 1,
    "minutes": 60,
    "minute": 60,
    "min": 60,
    "m": 60,
    "hours": 3600,
    "hour": 3600,
    "h": 3600,
    "days": 86400,
    "day": 86400,
    "d": 86400,
    "weeks": 604800,
    "week": 604800,
    "w": 604800,
}


def _any_case(word: str) -> str:
    """``min`` as ``[mM][iI][nN]``: the pattern is also the JSON schema's, which has no flags."""
    return "".join(f"[{c.lower()}{c.upper()}]" for c in word)


DURATION_PATTERN = (
    rf"^\s*(?:{_any_case('interval')}\s+)?(\d+(?:\.\d+)?)\s*({'|'.join(_any_case(u) for u in _UNITS)})?\s*$"
)
"""The grammar, as a regular expression; also the JSON schema's pattern of every duration field."""
_DURATION = re.compile(DURATION_PATTERN, re.ASCII)  # \d as JSON schema reads it: 0-9, not '٣'
EXAMPLES = "'30s', '15m', '12h' or '7d'"


def parse_duration(value: object, what: str = "duration", *, zero: bool = False) -> timedelta:
    """``value`` in the grammar (a number: seconds), positive (or zero, when ``zero``), shorter than
    ``timedelta``'s 999999999 days.

    Digits are 0-9 only, and a number too large for a float (a YAML integer of 400 digits) is refused as too long,
    not left to ``float()``'s ``OverflowError``.
    """
    wanted = f"{what} must be a duration such as {EXAMPLES}, got {shown(value)}"
    too_long = f"{what} must be shorter than 999999999 days, got {shown(value)}"
    if isinstance(value, bool):
        raise ConfigError(wanted)
    try:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            match = _DURATION.match(str(value))
            if not match:
                raise ConfigError(wanted)
            unit = match.group(2)
            seconds = float(match.group(1)) * (_UNITS[unit.lower()] if unit else 1)
    except OverflowError:  # float() of an integer past 1.8e308
        raise ConfigError(too_long) from None
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise ConfigError(f"{what} must be {'zero or more' if zero else 'positive'}, got {shown(value)}")
    try:
        return timedelta(seconds=seconds)  # inf too: "cannot convert float infinity to integer" is an OverflowError
    except OverflowError:
        raise ConfigError(too_long) from None


def spark_interval(text: str) -> str:
    """A checked trigger interval as Spark's ``processingTime`` reads it: whole milliseconds."""
    return f"{round(parse_duration(text, 'trigger_interval', zero=True).total_seconds() * 1000)} milliseconds"
