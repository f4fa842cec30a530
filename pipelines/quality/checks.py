"""The checks behind every verdict, on pandas frames of the sink's lineage.

Pure functions (no Spark, no I/O), so they are fast to test and the same code
serves the CLI, the demo and the Airflow DAGs. Sink order is
``(model_version, batch_id, task_seq)``: batch ids restart with each model
version's query, and ``task_seq`` is a row's place in its virtual task's batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipelines.core.hashing import key_buckets
from pipelines.core.model import TaskName
from pipelines.errors import ConfigError

SINK_ORDER = ["model_version", "batch_id", "task_seq"]
INPUT_ORDER = "input_order"
"""A row's place among its partition's records, in its input system's order (``with_input_order``)."""
EXAMPLES = 5


@dataclass
class Verdict:
    """Counts per check and the first offenders of each, named by key and offset."""

    records_expected: int = 0
    rows: int = 0
    dead_letters: int = 0
    lost: int = 0
    duplicates: int = 0
    order_violations: int = 0
    misrouted: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    keyless: int = 0  # rows without a key: no per-key order to keep, so not judged for order (said, not hidden)
    unread: int = 0
    """Records in input partitions the active model does not read at all (an expansion not yet absorbed)."""
    gone: int = 0
    """Sink rows of records the input no longer holds (retention removed them after they were read): no fault."""
    samples: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    """The same first offenders as ``examples``, as fields (key, stream, partition, offset, ...) a UI can show."""
    states: list[Any] = field(default_factory=list)
    """A stateful job's state checks (``quality.state_check.StateVerdict``), one per state."""

    @property
    def ok(self) -> bool:
        rows_ok = not (self.lost or self.duplicates or self.order_violations or self.misrouted or self.unread)
        return rows_ok and all(s.ok for s in self.states)

    def with_unread(self, unread: Mapping[str, int], version: int | None = None) -> Verdict:
        """Count the records of partitions no task of the active model reads: never lost yet, never read either."""
        self.unread = sum(unread.values())
        if self.unread:
            model = f"model v{version}" if version is not None else "the active model"
            self.examples["unread"] = [
                ", ".join(f"{part} ({n} records)" for part, n in sorted(unread.items()))
                + f" not read by {model}: absorb the expansion (the repartition watch does within a minute; "
                "`pipelines watch --apply` now)"
            ]
            self.samples["unread"] = [{"partition": part, "records": n} for part, n in sorted(unread.items())]
        return self

    def summary(self) -> str:
        head = "PASS" if self.ok else "FAIL"
        text = (
            f"{head}: {self.rows} rows + {self.dead_letters} dead letters for {self.records_expected} records; "
            f"lost {self.lost}, duplicated {self.duplicates}, out of order {self.order_violations}, "
            f"misrouted {self.misrouted}"
        )
        if self.unread:
            text += f", unread {self.unread}"
        if self.gone:
            text += (
                f"\n  {self.gone} of the rows are of records the input no longer holds (retention removed them after "
                "the job read them): not counted among the records"
            )
        if self.keyless:
            text += (
                f"\n  {self.keyless} records have no key: no per-key order to keep (SEP-32 spreads them by "
                "position), so the order check does not judge them"
            )
        for check, items in self.examples.items():
            text += f"\n  {check}: " + "; ".join(items)
        for state in self.states:
            text += "\n  " + state.summary().replace("\n", "\n  ")
        return text


def lost_records(expected: pd.DataFrame, rows: pd.DataFrame, dead: pd.DataFrame) -> pd.DataFrame:
    """Input records (stream, partition, offset) that are neither in the sink nor dead letters."""
    seen = pd.concat([rows[["stream", "partition", "offset"]], dead[["stream", "partition", "offset"]]])
    merged = expected.merge(seen.drop_duplicates(), on=["stream", "partition", "offset"], how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"].drop(columns="_merge")


def duplicated_records(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows.duplicated(["stream", "partition", "offset"], keep="first")]


def order_violations(rows: pd.DataFrame, sequence: str | None = None) -> list[tuple[str, str, str]]:
    """(key, earlier, later) where the sink got a key's record after one that came later in the input.

    Within a partition the input order is the input system's order of
    positions (the ``input_order`` column). Across partitions (a key moved by
    an expansion) only the producer knows the order, so when the rows carry a
    per-key ``sequence`` column that is used instead. Records without a key
    have no per-key order to keep (SEP-32 spreads them by position), so they
    are not judged.
    """
    bad: list[tuple[str, str, str]] = []
    ordered = rows[rows["key"].notna()].sort_values(SINK_ORDER, kind="stable")
    keys = ordered["key"].map(_text)
    for key, group in ordered.groupby(keys, sort=False):
        if sequence is not None:
            values = group[sequence].tolist()
            labels = [f"seq {v}" for v in values]
        else:
            labels = [f"{p}@{o}" for p, o in zip(group["partition"], group["offset"], strict=True)]
            # only positions in the same partition are comparable
            values = list(zip(group["partition"], group[INPUT_ORDER], strict=True))
        last: dict[object, tuple[object, str]] = {}
        for value, label in zip(values, labels, strict=True):
            scope = None if sequence is not None else value[0]
            prev = last.get(scope)
            if prev is not None and not prev[0] < value:
                bad.append((str(key), prev[1], label))
            last[scope] = (value, label)
    return bad


def misrouted_rows(rows: pd.DataFrame, factor_of: Callable[[int], int]) -> pd.DataFrame:
    """Rows whose key bucket is not hash(key) mod the factor of the model that processed them,
    or whose virtual task is not the one that owns that bucket."""
    bad = []
    for version, part in rows.groupby("model_version"):
        factor = factor_of(int(version))
        if factor == 1:
            bad.append(part[part["key_bucket"].notna()])
            continue
        expected = pd.Series(key_buckets(list(part["key"]), list(part["offset"]), factor), index=part.index)
        task_bucket = part["virtual_task"].map(lambda n: TaskName(n).key_bucket)
        task_factor = part["virtual_task"].map(lambda n: TaskName(n).factor)
        wrong = (part["key_bucket"] != expected) | (task_bucket != expected) | (task_factor != factor)
        bad.append(part[wrong])
    return pd.concat(bad) if bad else rows.iloc[0:0]


def check_sequence(rows: pd.DataFrame, sequence: str | None) -> None:
    """The per-key sequence named for the order check is a number column of the sink, or it is refused before any
    check runs (an unknown name ended a verification in a ``KeyError``)."""
    if sequence is None:
        return
    own = [c for c in rows.columns if c not in _LINEAGE and c != INPUT_ORDER]
    if sequence not in own:
        columns = ", ".join(own) or "none"
        raise ConfigError(f"--sequence {sequence!r} is not a column of the job's output; its columns: {columns}")
    if not pd.api.types.is_numeric_dtype(rows[sequence]):  # whole numbers read as floats where some are null
        raise ConfigError(f"--sequence {sequence!r} must be a column of whole numbers, it holds {rows[sequence].dtype}")


_LINEAGE = (
    "virtual_task",
    "model_version",
    "key_bucket",
    "stream",
    "partition",
    "offset",
    "key",
    "batch_id",
    "task_seq",
)
"""The columns the sink adds to the process function's own (``runtime.schemas.PROCESSED_LINEAGE``): a record's
lineage, never a per-key sequence."""


def verify_rows(
    expected: pd.DataFrame,
    rows: pd.DataFrame,
    dead: pd.DataFrame,
    factor_of: Callable[[int], int],
    sequence: str | None = None,
) -> Verdict:
    """All checks over one window: ``expected`` lists the input records (stream, partition, offset) it covers."""
    check_sequence(rows, sequence)
    lost = lost_records(expected, rows, dead)
    dups = duplicated_records(rows)
    order = order_violations(rows, sequence)
    wrong = misrouted_rows(rows, factor_of)
    verdict = Verdict(len(expected), len(rows), len(dead), len(lost), len(dups), len(order), len(wrong))
    verdict.keyless = int(rows["key"].isna().sum())
    verdict.examples = {
        name: items
        for name, items in {
            "lost": _offsets(lost),
            "duplicated": [
                f"key {_text(k)} at {s}/{p}@{o}" for k, s, p, o in _head(dups, ["key", "stream", "partition", "offset"])
            ],
            "out of order": [f"key {k}: {a} then {b}" for k, a, b in order[:EXAMPLES]],
            "misrouted": [
                f"key {_text(k)} at {p}@{o} in {t} (bucket {b})"
                for k, p, o, t, b in _head(wrong, ["key", "partition", "offset", "virtual_task", "key_bucket"])
            ],
        }.items()
        if items
    }
    return verdict


def expected_records(parts: Iterable[tuple[str, int, Iterable[str]]]) -> pd.DataFrame:
    """Rows (stream, partition, offset) of the input records a window covers, as read from the input."""
    frames = [
        pd.DataFrame({"stream": stream, "partition": partition, "offset": list(offsets)})
        for stream, partition, offsets in parts
    ]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(
            {"stream": pd.Series(dtype=str), "partition": pd.Series(dtype="int32"), "offset": pd.Series(dtype=str)}
        )
    result = pd.concat(frames, ignore_index=True)
    result["partition"] = result["partition"].astype("int32")
    result["offset"] = result["offset"].astype(str)
    return result


def with_input_order(frame: pd.DataFrame, order: Callable[[str], Callable[[str], Any]]) -> pd.DataFrame:
    """``frame`` with ``input_order``: each row's rank among its stream's positions, in the stream's system order.

    ``order(stream)`` is that stream's ``position_key``. Positions are opaque,
    so the rank (an integer) is what the order checks compare.
    """
    frame = frame.copy()
    ranks = pd.Series(0, index=frame.index, dtype="int64")
    for stream, part in frame.groupby("stream", sort=False):
        key = order(str(stream))
        unique = sorted(pd.unique(part["offset"].astype(str)), key=key)
        rank = {position: i for i, position in enumerate(unique)}
        ranks.loc[part.index] = part["offset"].astype(str).map(rank).astype("int64")
    frame[INPUT_ORDER] = ranks
    return frame


def _offsets(frame: pd.DataFrame) -> list[str]:
    return [f"{s}/{p}@{o}" for s, p, o in _head(frame, ["stream", "partition", "offset"])]


def _head(frame: pd.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    return list(frame[columns].head(EXAMPLES).itertuples(index=False, name=None))


def _sample(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, object]]:
    """The first ``EXAMPLES`` offenders as plain JSON-able fields (``key_text`` named ``key``)."""
    present = [c for c in columns if c in frame.columns]
    rows = []
    for values in _head(frame, present):
        row = {("key" if c == "key_text" else c): _plain(v) for c, v in zip(present, values, strict=True)}
        rows.append(row)
    return rows


def _plain(value: object) -> object:
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy and pandas scalars
        value = value.item()
    if isinstance(value, float) and value != value:  # NaN: a missing value
        return None
    return value if isinstance(value, int | float | str | bool) else _text(value)


def _text(key: object) -> str:
    if isinstance(key, bytes | bytearray):
        return key.decode("utf-8", "backslashreplace")
    return str(key)


def factor_lookup(factors: Mapping[int, int]) -> Callable[[int], int]:
    return lambda version: factors[version]


# ---------------------------------------------------------------------- per-row flags (vectorized)
#
# The Great Expectations layer validates these flags: each check becomes a boolean column (or, for
# duplicates, the lineage columns themselves) that a built-in expectation can assert row by row, so the
# failing rows' keys and offsets appear in the GX result and in Data Docs. Vectorized with pandas groupby,
# so a million sink rows take seconds, not the per-key Python loop of ``order_violations``.

FLAG_DELIVERED = "delivered"
FLAG_IN_ORDER = "in_key_order"
FLAG_ROUTED = "routed_to_own_bucket"


def delivered_flags(expected: pd.DataFrame, rows: pd.DataFrame, dead: pd.DataFrame) -> pd.DataFrame:
    """``expected`` (stream, partition, offset) with a ``delivered`` column: in the sink or the dead letters."""
    cols = ["stream", "partition", "offset"]
    seen = pd.concat([rows[cols], dead[cols]]).drop_duplicates()
    seen = seen.astype({"partition": "int64", "offset": str})
    base = expected[cols].astype({"partition": "int64", "offset": str})
    merged = base.merge(seen, on=cols, how="left", indicator=True)
    merged[FLAG_DELIVERED] = merged["_merge"] == "both"
    return merged.drop(columns="_merge")


def order_flags(rows: pd.DataFrame, sequence: str | None = None) -> pd.DataFrame:
    """Per row: ``in_key_order`` (False if the key's previous sink row came later in the input) and ``after``,
    the label of that previous row. Same rule as :func:`order_violations`."""
    ordered = rows.sort_values(SINK_ORDER, kind="stable")
    if sequence is not None:
        value = ordered[sequence].astype("int64")
        scope = [ordered["key"]]
        label = "seq " + value.astype(str)
    else:
        value = ordered[INPUT_ORDER].astype("int64")
        scope = [ordered["key"], ordered["partition"]]
        label = ordered["partition"].astype(str) + "@" + ordered["offset"].astype(str)
    prev = value.groupby(scope, sort=False, dropna=True).shift(1)
    prev_label = label.groupby(scope, sort=False, dropna=True).shift(1)
    ok = ~(prev.notna() & (value <= prev)) | ordered["key"].isna()  # keyless records have no per-key order
    return pd.DataFrame({FLAG_IN_ORDER: ok, "after": prev_label.where(~ok), "label": label}).reindex(rows.index)


def routing_flags(rows: pd.DataFrame, factor_of: Callable[[int], int]) -> pd.Series:
    """Per row: True if key bucket = hash(key) mod the factor of its model and its virtual task owns that bucket."""
    ok = pd.Series(True, index=rows.index)
    for version, part in rows.groupby("model_version"):
        factor = factor_of(int(version))
        if factor == 1:
            ok.loc[part.index] = part["key_bucket"].isna()
            continue
        expected = pd.Series(key_buckets(list(part["key"]), list(part["offset"]), factor), index=part.index)
        tasks = {n: TaskName(n) for n in part["virtual_task"].unique()}
        task_bucket = part["virtual_task"].map({n: t.key_bucket for n, t in tasks.items()})
        task_factor = part["virtual_task"].map({n: t.factor for n, t in tasks.items()})
        ok.loc[part.index] = (part["key_bucket"] == expected) & (task_bucket == expected) & (task_factor == factor)
    return ok


@dataclass
class Annotated:
    """One window's frames with a flag per check: what the GX suites validate."""

    records: pd.DataFrame  # expected input records + delivered
    rows: pd.DataFrame  # sink rows (key as text) + in_key_order, routed_to_own_bucket, duplicated
    dead: pd.DataFrame

    def verdict(self) -> Verdict:
        lost = self.records[~self.records[FLAG_DELIVERED]]
        dups = self.rows[self.rows["duplicated"]]
        order = self.rows[~self.rows[FLAG_IN_ORDER]]
        wrong = self.rows[~self.rows[FLAG_ROUTED]]
        verdict = Verdict(
            len(self.records), len(self.rows), len(self.dead), len(lost), len(dups), len(order), len(wrong)
        )
        found = {
            "lost": _offsets(lost),
            "duplicated": [
                f"key {k} at {s}/{p}@{o}" for k, s, p, o in _head(dups, ["key_text", "stream", "partition", "offset"])
            ],
            "out of order": [f"key {k}: {a} then {b}" for k, a, b in _head(order, ["key_text", "after", "label"])],
            "misrouted": [
                f"key {k} at {p}@{o} in {t} (bucket {b})"
                for k, p, o, t, b in _head(wrong, ["key_text", "partition", "offset", "virtual_task", "key_bucket"])
            ],
        }
        verdict.examples = {name: items for name, items in found.items() if items}
        samples = {
            "lost": _sample(lost, ["stream", "partition", "offset"]),
            "duplicated": _sample(dups, ["key_text", "stream", "partition", "offset"]),
            "out of order": _sample(order, ["key_text", "stream", "partition", "offset", "after"]),
            "misrouted": _sample(wrong, ["key_text", "stream", "partition", "offset", "virtual_task", "key_bucket"]),
        }
        verdict.samples = {name: items for name, items in samples.items() if items}
        verdict.keyless = int(self.rows["keyless"].sum()) if "keyless" in self.rows else 0
        return verdict


def annotate(
    expected: pd.DataFrame,
    rows: pd.DataFrame,
    dead: pd.DataFrame,
    factor_of: Callable[[int], int],
    sequence: str | None = None,
) -> Annotated:
    """Flag every expected record and sink row; ``Annotated.verdict()`` gives the same counts as ``verify_rows``."""
    check_sequence(rows, sequence)
    rows = rows.reset_index(drop=True)
    order = order_flags(rows, sequence)
    flagged = rows.drop(columns=[c for c in ("key",) if c in rows]).copy()
    flagged.insert(0, "key_text", _texts(rows["key"]))
    flagged["keyless"] = rows["key"].isna().to_numpy()
    flagged[FLAG_IN_ORDER] = order[FLAG_IN_ORDER].to_numpy()
    flagged["after"] = order["after"].to_numpy()
    flagged["label"] = order["label"].to_numpy()
    flagged[FLAG_ROUTED] = routing_flags(rows, factor_of).to_numpy()
    flagged["duplicated"] = rows.duplicated(["stream", "partition", "offset"], keep="first").to_numpy()
    return Annotated(delivered_flags(expected, rows, dead), flagged, dead.reset_index(drop=True))


def _texts(keys: pd.Series) -> pd.Series:
    uniques = {k: _text(k) for k in pd.unique(keys.dropna())} if len(keys) else {}
    return keys.map(uniques).fillna("<null>").astype(str)
