"""The state check: each key's state row agrees with that key's records in the input, whatever the user's fold.

Every record applied to a key's state counts on its row (``_records``) and names itself as the key's last
(``_last_stream``, ``_last_partition``, ``_last_offset``; ``pipelines.core.state``). So for the input records up
to the committed checkpoints, less the dead letters (a record the function failed on leaves the state as it
was), each key must have a row whose count is its number of records and whose last is its last record: a
record applied twice, lost, or applied to a row another task had moved on from shows here. Pure pandas.

* Within a partition the last is by the input system's order (``input_order``). A key whose records sit in
  two partitions (an expansion moved it) has its last in one of them: the row's last must be the last of its
  partition there.
* A state with a time-to-live: a key whose row expired starts again at its next record, so a key with no row
  is not judged, and a row is judged from its ``_first_*`` record on (in that record's partition).
* An input that no longer holds a key's early records (retention) cannot be counted: then only the last is
  judged, and the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from pipelines.core import state as rules
from pipelines.quality.checks import EXAMPLES, INPUT_ORDER, _text

FLAG_STATE = "state_matches_input"
STATE_COLUMNS = [rules.KEY, rules.RECORDS, *rules.FIRST, *rules.LAST]


@dataclass
class StateVerdict:
    """One state's check: keys judged, keys whose row disagrees with the input, and the first of them."""

    state: str
    keys: int = 0
    wrong: int = 0
    absent: int = 0
    """Keys with records but no row, in a state with a time-to-live (expired): not judged."""
    counted: bool = True
    """False when the input no longer holds every record (retention): only each key's last is judged."""
    examples: list[str] = field(default_factory=list)
    samples: list[dict[str, object]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.wrong == 0

    def summary(self) -> str:
        head = "PASS" if self.ok else "FAIL"
        text = f"state {self.state}: {head}: {self.keys} keys judged, {self.wrong} disagree with the input"
        if self.absent:
            text += f", {self.absent} expired (time-to-live)"
        if not self.counted:
            text += "; counts not judged: the input no longer holds every record the state counts"
        if self.examples:
            text += "\n  " + "; ".join(self.examples)
        return text


def applied_records(records: pd.DataFrame, dead: pd.DataFrame) -> pd.DataFrame:
    """The keyed input records the state must reflect: every record up to the checkpoints, less dead letters."""
    keyed = records[records["key"].notna()]
    if dead.empty:
        return keyed
    cols = ["stream", "partition", "offset"]
    gone = dead[cols].astype({"partition": "int64", "offset": str}).drop_duplicates()
    base = keyed.astype({"partition": "int64", "offset": str})
    merged = base.merge(gone, on=cols, how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"].drop(columns="_merge")


_PLAIN = {
    rules.RECORDS: "state_records",
    rules.FIRST[0]: "first_stream",
    rules.FIRST[1]: "first_partition",
    rules.FIRST[2]: "first_offset",
    rules.LAST[0]: "last_stream",
    rules.LAST[1]: "last_partition",
    rules.LAST[2]: "last_offset",
}


def state_flags(
    state: str, applied: pd.DataFrame, rows: pd.DataFrame, *, ttl: bool = False, counted: bool = True
) -> tuple[pd.DataFrame, StateVerdict]:
    """One row per key (of the input or of the state) with ``state_matches_input`` and why not; and the verdict.

    ``applied``: stream, partition, offset, key, input_order (``applied_records``); ``rows``: the state's rows
    (``STATE_COLUMNS``).
    """
    applied = applied.assign(
        partition=applied["partition"].astype("int64"),
        offset=applied["offset"].astype(str),
        key_text=applied["key"].map(_text).astype(object),
    ).sort_values(INPUT_ORDER, kind="stable")
    # per key and partition: its last record, and each record's count of records from it to that last
    group = applied.groupby(["key_text", "stream", "partition"], sort=False)
    applied["to_last"] = group.cumcount(ascending=False) + 1
    lasts = group.tail(1)[["key_text", "stream", "partition", "offset"]].rename(
        columns={"stream": "last_stream", "partition": "last_partition", "offset": "part_last"}
    )
    counts = applied.groupby("key_text").size().rename("input_records")
    overall = applied.groupby("key_text").tail(1).set_index("key_text")
    input_last = (overall["stream"] + "/" + overall["partition"].astype(str) + "@" + overall["offset"]).rename(
        "input_last"
    )
    spans = applied.drop_duplicates(["key_text", "stream", "partition"]).groupby("key_text").size().rename("partitions")
    since = applied[["key_text", "stream", "partition", "offset", "to_last"]].rename(
        columns={"stream": "first_stream", "partition": "first_partition", "offset": "first_offset"}
    )

    mine = rows[STATE_COLUMNS].rename(columns=_PLAIN)
    mine = mine.assign(key_text=mine[rules.KEY].map(_text).astype(object)).drop(columns=[rules.KEY])
    frame = pd.DataFrame({"key_text": pd.Series(sorted(set(counts.index) | set(mine["key_text"])), dtype=object)})
    frame = frame.merge(counts, left_on="key_text", right_index=True, how="left")
    frame = frame.merge(spans, left_on="key_text", right_index=True, how="left")
    frame = frame.merge(input_last, left_on="key_text", right_index=True, how="left")
    frame = frame.merge(mine, on="key_text", how="left")
    frame["input_records"] = frame["input_records"].fillna(0).astype("int64")
    frame["partitions"] = frame["partitions"].fillna(0).astype("int64")
    has_row = frame["state_records"].notna()
    for c in ("last_partition", "first_partition"):
        frame[c] = frame[c].astype("Int64")
    frame = frame.merge(
        lasts.astype({"last_partition": "Int64"}), on=["key_text", "last_stream", "last_partition"], how="left"
    )
    frame = frame.merge(
        since.astype({"first_partition": "Int64"}),
        on=["key_text", "first_stream", "first_partition", "first_offset"],
        how="left",
    )
    frame["state_last"] = (
        frame["last_stream"].astype(str)
        + "/"
        + frame["last_partition"].astype(str)
        + "@"
        + frame["last_offset"].astype(str)
    ).where(has_row)
    reasons = [
        _reason(r, ttl=ttl, counted=counted)
        for r in frame[
            [
                "state_records",
                "input_records",
                "partitions",
                "part_last",
                "last_offset",
                "state_last",
                "input_last",
                "to_last",
            ]
        ].itertuples(index=False)
    ]
    frame["reason"] = reasons
    frame[FLAG_STATE] = frame["reason"].isna()
    absent = (~has_row) & (frame["input_records"] > 0)
    verdict = StateVerdict(state, counted=counted)
    verdict.keys = int((has_row | (absent & (not ttl))).sum())
    verdict.absent = int((absent & ttl).sum()) if ttl else 0
    wrong = frame[~frame[FLAG_STATE]]
    verdict.wrong = len(wrong)
    head = wrong.head(EXAMPLES)
    verdict.examples = [f"key {k}: {why}" for k, why in zip(head["key_text"], head["reason"], strict=True)]
    verdict.samples = [
        {"key": str(k), "input_records": int(n), "state_records": None if pd.isna(s) else int(s), "why": str(w)}
        for k, n, s, w in zip(
            head["key_text"], head["input_records"], head["state_records"], head["reason"], strict=True
        )
    ]
    out = frame[["key_text", "input_records", "state_records", "input_last", "state_last", FLAG_STATE, "reason"]]
    return out, verdict


def _reason(r: tuple[object, ...], *, ttl: bool, counted: bool) -> str | None:
    """Why a key's row disagrees with the input (None: it agrees)."""
    records, n, partitions, part_last, last_offset, state_last, input_last, to_last = r
    n = int(n)  # type: ignore[call-overload]
    if pd.isna(records):
        if n and not ttl:
            return f"{n} records applied in the input, no state row"
        return None
    records = int(records)  # type: ignore[call-overload]
    if n == 0:
        if records and counted:
            return f"a state row counting {records} records, none applied in the input"
        return None
    if pd.isna(part_last) or str(part_last) != str(last_offset):
        return f"the state's last record is {state_last}, the input's is {input_last}"
    if not counted:
        return None
    if not ttl:
        if records != n:
            return f"{n} records applied in the input, the state counts {records}"
        return None
    if partitions == 1 and not pd.isna(to_last):  # the row began at its first record (after an expiry, maybe)
        if records != int(to_last):  # type: ignore[call-overload]
            return f"{int(to_last)} records since its row began, the state counts {records}"  # type: ignore[call-overload]
        return None
    if records > n:
        return f"{n} records applied in the input, the state counts {records}"
    return None
