"""Errors a user can act on.

Every error the platform raises on bad input is a `PipelinesError`, so the CLI
and the Airflow tasks can tell a user mistake (print it, exit non-zero, keep the
job on its old model) from a bug (a traceback).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class PipelinesError(Exception):
    """Base of all errors caused by input the user can fix."""

    @property
    def code(self) -> str:
        """A stable name for scripts (``--json`` prints it): the class name in snake case, without ``_error``."""
        return error_code(type(self).__name__)


def error_code(name: str) -> str:
    """``PartitionChangeError`` -> ``partition_change``; ``PipelinesError`` -> ``pipelines``."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return snake.removesuffix("_error")


class ConfigError(PipelinesError):
    """A job configuration, elasticity factor or grouper choice is invalid."""


class PartitionChangeError(PipelinesError):
    """An input's partition count changed in a way the job cannot absorb."""


class ModelError(PipelinesError):
    """A stored job model or checkpoint map does not parse or is inconsistent."""


class UnknownJobError(PipelinesError):
    """The named job has no job model in the control plane."""


class StreamError(PipelinesError):
    """An embedded-log stream is missing, already exists, or was asked something impossible."""


class InputRewoundError(StreamError):
    """An input partition ends before where the job's checkpoint stands: the stream was deleted and made again, or
    lost records it had held. Not an outage: waiting would read the new records from the old position, skipping
    those before it (docs/systems/kafka.md, "Reads")."""


class DamagedTableError(PipelinesError):
    """A Delta table in the home cannot be read: a truncated or garbled commit, or a damaged or missing data file."""


class StoreUnavailableError(PipelinesError):
    """The home's object store did not answer a request, or answered it with a server error (5xx, throttling).

    Not damage: the data is where it was, and the same request may work a
    moment later. A stream's reads wait it out like any input's outage; a
    command reports it as an outage, never as a table to restore.
    """


class StoreError(PipelinesError):
    """An adjunct data store cannot be read, written or served as asked (its message says what to do)."""


def closest(word: object, choices: Iterable[str]) -> str | None:
    """The choice a misspelled ``word`` was probably meant to be (difflib's ratio of at least 0.6), or None."""
    found = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)``, or nothing when no choice is close: the one hint every refusal of a name gives."""
    match = closest(word, choices)
    return f" (did you mean {match!r}?)" if match else ""


def unknown_fields(given: Iterable[object], known: Iterable[str]) -> str | None:
    """What is wrong with the fields ``given`` of a section that has ``known`` ones, or None when all are known."""
    names = sorted(known)
    unknown = sorted(str(k) for k in given if k not in names)
    if not unknown:
        return None
    hints = [f"{field!r}{did_you_mean(field, names)}" for field in unknown]
    return f"unknown field(s) {', '.join(hints)}; the fields are {', '.join(names)}"


def refuse_unknown(where: str, given: Iterable[object], known: Iterable[str]) -> None:
    """Refuse fields a section does not have, suggesting the one meant: a misspelled key is never ignored.

    ``elasticty_factor: 4`` silently ignored would run the job at factor 1;
    every YAML section and settings mapping is checked this way (the
    pydantic models through ``pipelines.settings.Section``).
    """
    message = unknown_fields(given, known)
    if message is not None:
        raise ConfigError(f"{where}: {message}")


_RAISED = re.compile(r"pipelines\.errors\.([A-Za-z]+Error): (.+)")


_UNANSWERED = re.compile(
    r"error sending request|timed out|connection (?:refused|reset|closed)|"
    r"non-2xx status code: (?:5\d\d|429)|\b(?:5\d\d|429) (?:Internal Server Error|Bad Gateway|Service Unavailable|"
    r"Gateway Timeout|Too Many Requests)|SlowDown|ServiceUnavailable|InternalError|RequestTimeout|"
    r"HTTP status (?:5\d\d|429)|NETWORK_CONNECTION|curlCode: (?:6|7|28|52|56)\b|"
    r"SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|REQUEST_TIME_?OUT",
    re.IGNORECASE,
)


def store_unanswered(text: str) -> bool:
    """Whether delta-rs's error text is its object store not answering, or answering with a server error.

    delta-rs raises one ``OSError`` for everything its object store met, a
    refused connection, a timed-out request or a 503 as much as a missing
    or garbled file; only the chain of causes tells them apart (``... after
    2 retries ... error sending request ... operation timed out``);
    pyarrow's S3 errors say the same in the AWS SDK's words
    (``NETWORK_CONNECTION``, ``curlCode: 28``, ``SLOW_DOWN``). A 4xx other
    than throttling (a missing object, wrong keys) is not an outage, nor is
    a damaged file, nor a failure to load credentials (its chain may hold
    the metadata endpoint's timeout, but the fix is the user's).
    """
    line = one_line(text)
    return "credentials" not in line.lower() and _UNANSWERED.search(line) is not None


def raised_inside(text: str) -> PipelinesError | None:
    """The platform's error a Spark failure carries in its text (a Python worker's traceback), or None.

    A task that raised, e.g., ``DamagedTableError`` reaches the driver as a
    Java exception whose message holds the worker's whole traceback; the user
    needs its last line, as the class it was. The innermost (last) one wins.
    """
    found = _RAISED.findall(text)
    if not found:
        return None
    name, message = found[-1]
    return by_name(name, message.split(" SQLSTATE:")[0].strip())


_FRAME = re.compile(r"at [\w$.<>/]+\(|\.\.\. \d+ more$|File \"|Traceback \(most recent call last\)")
_CHATTER = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:INFO|WARN|DEBUG|TRACE) |WARNING: |Using Spark's default")
_ERRORISH = re.compile(r"(?:Exception|Error)\b[^:]*:|^error: ", re.IGNORECASE)
_LINE_LIMIT = 500


def last_error_line(text: str) -> str | None:
    """The line of a process's output that says why it failed, or None for no output.

    A driver that dies while starting leaves a JVM's stack trace or a Python
    traceback among Spark's INFO and WARN lines; the user needs the exception's
    own line (``Exception in thread "main" ...: When running with master
    'yarn' ...``), not the last stack frame. The last exception line wins (the
    innermost cause); with none, the last line that is neither a frame nor
    log chatter.
    """
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines()]
    kept = [line for line in lines if line and not _FRAME.match(line) and not _CHATTER.match(line)]
    errors = [line for line in kept if _ERRORISH.search(line)]
    picked = (errors or kept or [""])[-1].removeprefix(": ").strip()
    if len(picked) > _LINE_LIMIT:
        picked = picked[: _LINE_LIMIT - 3] + "..."
    return picked or None


def by_name(name: str, message: str) -> PipelinesError:
    """The platform error class called ``name`` (``PipelinesError`` for any other name), with ``message``."""
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, PipelinesError)):
        cls = PipelinesError
    return cls(message)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_XML_ERROR = re.compile(
    r"<\?xml[^>]*\?>\s*:?\s*<Error>.*?<Code>(.*?)</Code>\s*<Message>(.*?)</Message>.*?</Error>", re.S
)
_CAUSE = re.compile(r"\s*(?:↳|caused by:)\s*", re.IGNORECASE)


def one_line(text: str) -> str:
    """A library's error as one line: colour codes removed, its chain of causes joined with ``: ``.

    delta-rs raises ``OSError`` whose text is a coloured, indented chain (``Operation not supported`` then
    ``↳ an error occurred while loading credentials`` ...), with an S3 error's XML body in it when the store
    answered; the CLI's contract is one ``error:`` line.
    """
    parts: list[str] = []
    text = _XML_ERROR.sub(lambda m: f"{m[1]}: {m[2]}", _ANSI.sub("", text))  # an S3 error body: its code, message
    for line in text.splitlines():
        part = _CAUSE.sub("", line, count=1).strip() if _CAUSE.match(line) else line.strip()
        if part and (not parts or part != parts[-1]):
            parts.append(part)
    return ": ".join(parts)
