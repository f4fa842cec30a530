"""The bounds a plan and a number read from the user are held to, checked before anything is built.

A partition count, a plan's task count, a whole number typed on the command
line or written in a file: each is checked here, in plain values, so a typo
(``--partitions 99999999999999999999``, a factor of ``²``) is refused with a
sentence instead of hanging while millions of tasks are built, or ending in
Python's own ``int()`` error. Pure: the CLI's argument types, the planners
and the embedded log all take their caps from here.
"""

from __future__ import annotations

import unicodedata

from pipelines.errors import ConfigError

MAX_PARTITIONS = 100_000
"""Partitions of one input stream, at most: more than any job here can plan (a model holds a task per partition
and key bucket), and far more than Kafka advises per cluster. ``stream expand --partitions 100000000`` was still
building its metadata minutes later, instead of being refused."""

MAX_TASKS = 1_000_000
"""Virtual tasks (partitions x elasticity factor, summed over the inputs) of one plan, at most: planning a million
takes some seconds and a gigabyte, and each is a checkpoint row per micro-batch; 100,000 partitions x 1024 would be
a hundred million, hours of planning before any error."""

MAX_COUNT = 2**63 - 1
"""The largest whole number the control tables (64-bit columns) and Arrow can hold: versions, counts, offsets."""

MAX_DIGITS = 30
"""Digits a whole number typed or written as text may have: ``int()`` of a longer string is slow, and past 4,300
digits Python refuses it with its own error; no count here has more than 19."""

MAX_MINUTES = 10 * 366 * 24 * 60
"""How far back ``status --minutes`` may look: ten years. A window reaching before year 1 has no date."""

MAX_WAIT_S = MAX_MINUTES * 60
"""The longest wait or timeout an operator may give (a lock wait, a restart or catch-up timeout, a demo's run on a
model): ten years. ``time.sleep`` and ``float`` overflow long before a number a JSON conf can hold (``10**400``
passed Airflow's Params and failed after the rescale had stopped the job)."""

MAX_WATCH_S = 24 * 60 * 60.0
"""The longest refresh period of ``status --watch``: a day (``time.sleep`` refuses periods past the platform's
``time_t``)."""

MAX_REASON = 500
"""Characters a reason an operator gives (a rescale's, a saved model's) may have: a sentence or two. It is stored with
the new job model and in the Airflow run's conf, and shown in ``job history``, the page's tables and the run's note;
200,000 were taken. The page's field (``maxlength``) and the DAG's Param (``maxLength``) hold the same number."""

_NOT_IN_A_LINE = {"Cc", "Cs", "Zl", "Zp"}
"""Unicode categories a one-line text may not hold: control characters (NUL, tab, newline, escape, DEL, C1), lone
surrogates, and the line and paragraph separators. Format characters (Cf) stay: Persian needs the zero-width
non-joiner, an emoji sequence the joiner."""

_BIDI_CONTROLS = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"}
"""Unicode's explicit directional formatting characters (by ``unicodedata.bidirectional``): an override or an
isolate left open reorders what follows it on the line, so a reason could show another factor or job than it
names in a log line or a terminal (the "Trojan Source" trick, CVE-2021-42574). The marks that only hint at a
direction (U+200E, U+200F, U+061C) stay: they reorder nothing around them."""

_CALLED = {
    "\x00": "a NUL",
    "\t": "a tab",
    "\n": "a newline",
    "\r": "a carriage return",
    "\u2028": "a line separator",
    "\u2029": "a paragraph separator",
}


def whole_number(text: object, *, signed: bool = False) -> int | None:
    """The whole number ``text`` spells in ASCII digits 0-9 (spaces around it allowed), or None.

    ``str.isdigit`` accepts ``²`` (which ``int()`` then refuses) and ``int()``
    reads ``٣`` as 3 and ``1_000`` as 1000; neither is a number a user typed
    on purpose. More than ``MAX_DIGITS`` digits is no number either.
    ``signed`` allows a leading ``-`` or ``+``.
    """
    if not isinstance(text, str):
        return None
    digits = text.strip()
    sign = 1
    if signed and digits[:1] in ("-", "+"):
        sign, digits = (-1 if digits[0] == "-" else 1), digits[1:]
    if not digits or len(digits) > MAX_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return sign * int(digits)


def not_utf8(text: str) -> str | None:
    """``text`` with its undecodable bytes as ``\\xff`` escapes when it is not UTF-8 text, else None. Python hands
    command-line and environment bytes of another encoding over as lone surrogates, which pyarrow, delta-rs and
    py4j fail on deep inside."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return None


def check_reason(reason: object, what: str = "reason") -> str:
    """The reason an operator gave, stripped: one line of printable text of 1 to ``MAX_REASON`` characters.

    The one rule for the CLI's ``--reason``, the page's form and the DAG's Param. A reason is read on one line
    (a row of ``job history``, a table cell, a run's note, a log line), so it may hold no newline or tab (they
    break the row), no escape sequence (it repaints the terminal that shows the history), no NUL (C readers end
    the text there), no lone surrogate (not UTF-8: Delta cannot store it) and no bidirectional override or
    isolate (it reorders what is shown after it). The length is the text as given, as
    the form's ``maxlength`` and the Param's ``maxLength`` count it. A refusal names the character and where it
    is, never the text, which may be 200,000 characters.
    """
    if not isinstance(reason, str):
        raise ConfigError(f"{what} must be text, got {shown(reason)}")
    if len(reason) > MAX_REASON:
        raise ConfigError(
            f"{what} has {len(reason):,} characters: at most {MAX_REASON}, a sentence or two (it is stored with the "
            "new job model and shown on one line)"
        )
    for at, char in enumerate(reason, 1):
        category = unicodedata.category(char)
        if unicodedata.bidirectional(char) in _BIDI_CONTROLS:
            raise ConfigError(
                f"{what} holds a bidirectional control (U+{ord(char):04X}) at character {at:,}: it would reorder "
                "the text around it where the reason is shown; a reason is one line of printable text"
            )
        if category in _NOT_IN_A_LINE:
            called = _CALLED.get(char, "a lone surrogate" if category == "Cs" else "a control character")
            utf8 = ", which is not UTF-8 text" if category == "Cs" else ""
            raise ConfigError(
                f"{what} holds {called} (U+{ord(char):04X}) at character {at:,}{utf8}: a reason is one line of "
                "printable text"
            )
    if not reason.strip():
        raise ConfigError(f"{what} is empty: a new job model needs a reason (it is recorded with the model)")
    return reason.strip()


def _refused(char: str) -> bool:
    return unicodedata.category(char) in _NOT_IN_A_LINE or unicodedata.bidirectional(char) in _BIDI_CONTROLS


def printable(text: str) -> str:
    """``text`` with every character ``check_reason`` refuses made a space: for what the platform itself adds to a
    reason (a plugged autosize policy's reasons may hold anything), which has no operator to refuse it to."""
    return "".join(" " if _refused(char) else char for char in text)


def shown(value: object, limit: int = 60) -> str:
    """``value`` as a message quotes it: its ``repr``, cut to ``limit`` characters (a 5,000-digit number is not
    one line), and never raising (``repr`` of an integer past 4,300 digits does)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"<a number of about {int(value.bit_length() * 0.30103) + 1:,} digits>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # a huge integer inside a list or mapping; a list nested 990 deep
        return f"<a {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text):,} characters)"


def check_partition_count(partitions: object, what: str = "partition count") -> int:
    """A stream's partition count: a whole number from 1 to ``MAX_PARTITIONS``."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ConfigError(f"{what} must be a whole number >= 1, got {shown(partitions)}")
    if partitions < 1:
        raise ConfigError(f"{what} must be >= 1, got {partitions}")
    if partitions > MAX_PARTITIONS:
        raise ConfigError(f"{what} must be at most {MAX_PARTITIONS:,}, got {_big(partitions)}")
    return partitions


def check_partition_number(partition: int, what: str = "partition") -> int:
    """A partition's number: below ``MAX_PARTITIONS`` (the caller has checked it is a whole number >= 0)."""
    if partition >= MAX_PARTITIONS:
        raise ConfigError(
            f"{what} {_big(partition)} is past the last partition a stream can have "
            f"({MAX_PARTITIONS - 1:,}: at most {MAX_PARTITIONS:,} partitions)"
        )
    return partition


def check_task_count(partitions: int, factor: int, what: str = "the plan") -> int:
    """``partitions`` x ``factor`` key buckets (virtual tasks' inputs, checkpoints), refused past ``MAX_TASKS``
    before any is built."""
    tasks = partitions * factor
    if tasks > MAX_TASKS:
        raise ConfigError(
            f"{what} would have {_big(partitions)} partitions x factor {_big(factor)} = {_big(tasks)} key buckets, "
            f"each a virtual task's input and a checkpoint, more than the {MAX_TASKS:,} a job model can hold: "
            "use fewer partitions or a smaller factor"
        )
    return tasks


def _big(number: int) -> str:
    return f"{number:,}" if number.bit_length() <= 200 else shown(number)
