"""What commands print: JSON or a short human table, and the small formatters the tables share."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from pipelines.core.limits import whole_number

if TYPE_CHECKING:
    from pipelines.core.checkpoints import CheckpointMap
    from pipelines.core.ssp import SystemStreamPartition


class Output:
    """Prints either JSON or a short human table, so every command decides once what it shows."""

    def __init__(self, as_json: bool, out: TextIO, err: TextIO) -> None:
        self.as_json = as_json
        self.out = out
        self.err = err

    def emit(self, data: Any, human: Callable[[], str]) -> None:
        if self.as_json:
            json.dump(_plain(data), self.out, indent=2, sort_keys=False)
            self.out.write("\n")
        else:
            self.out.write(human().rstrip("\n") + "\n")

    def note(self, message: str) -> None:
        self.err.write(message + "\n")
        self.err.flush()


def _plain(value: Any) -> Any:
    """JSON-ready copy: dataclasses to dicts, datetimes to ISO strings, dict keys to strings."""
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def text(value: Any) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


def dash(value: Any) -> str:
    return "-" if value is None else str(value)


def sorted_offsets(checkpoints: CheckpointMap) -> list[tuple[SystemStreamPartition, str]]:
    return sorted(checkpoints.offsets.items(), key=lambda kv: ssp_order(kv[0]))


def ssp_order(ssp: SystemStreamPartition) -> tuple[str, str, int, int]:
    return (ssp.system, ssp.stream, ssp.partition, -1 if ssp.key_bucket is None else ssp.key_bucket)


def task_order(ssps: Iterable[SystemStreamPartition], name: str) -> tuple[Any, ...]:
    return (min((ssp_order(s) for s in ssps), default=("", "", -1, -1)), name)


def container_order(cid: str) -> tuple[int, str]:
    number = whole_number(cid)  # digits 0-9 only: a Samza model's processor-id may be '²'
    return (number, cid) if number is not None and number < 1 << 30 else (1 << 30, cid)
