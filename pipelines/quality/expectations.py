"""The Great Expectations suites that prove a window of a job: custom expectations and their suites.

GX 1.x has no expectation for per-key order, routing or "every input record arrived", and its
``UnexpectedRowsExpectation`` runs SQL only (not on pandas). Writing a full custom
``MulticolumnMapExpectation`` needs a metric provider per engine; instead ``checks.annotate`` computes one
boolean flag per row (vectorized pandas, the same rules as ``checks.verify_rows``) and each custom
expectation below is a *subclass* of the built-in ``ExpectColumnValuesToBeInSet`` bound to its flag column
with ``value_set=[True]``. That is GX 1.x's documented way to customize an expectation: the subclass gets its
own type name (``expect_rows_in_per_key_order``...), description and Data Docs entry, and it runs on every
engine GX supports with no new metric code. Duplicates need no flag: the built-in
``ExpectCompoundColumnsToBeUnique`` over the lineage (stream, partition, offset) says it directly.

The suites are built here and saved as JSON under ``include/expectations/`` (``save_suites``), so a reader
or another tool sees what is validated; a unit test keeps the files and the code in step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe

from pipelines.quality.checks import FLAG_DELIVERED, FLAG_IN_ORDER, FLAG_ROUTED
from pipelines.quality.state_check import FLAG_STATE

INCLUDE = Path(__file__).resolve().parents[2] / "include" / "expectations"
LINEAGE = ["stream", "partition", "offset"]


class ExpectInputRecordsDelivered(gxe.ExpectColumnValuesToBeInSet):
    """No loss: every input record below the committed checkpoints is in the sink or the dead letters."""

    column: str = FLAG_DELIVERED
    value_set: list[Any] = [True]  # noqa: RUF012  (a pydantic field default, copied per instance)
    description: str = "no loss: every input record up to the committed checkpoints is in the sink or dead letters"


class ExpectRowsInPerKeyOrder(gxe.ExpectColumnValuesToBeInSet):
    """Per-key order: in sink order, no row of a key follows a row that came later in the input."""

    column: str = FLAG_IN_ORDER
    value_set: list[Any] = [True]  # noqa: RUF012
    description: str = "per-key order: offsets within a partition (or the producer's per-key seq) never go back"


class ExpectRowsRoutedToTheirBucket(gxe.ExpectColumnValuesToBeInSet):
    """Routing: key bucket = hash(key) mod the factor of the model version, processed by that bucket's task."""

    column: str = FLAG_ROUTED
    value_set: list[Any] = [True]  # noqa: RUF012
    description: str = "routing: bucket = murmur3(key) mod factor, and each virtual task saw only its own bucket"


class ExpectKeyStatesToMatchInput(gxe.ExpectColumnValuesToBeInSet):
    """State: every key's state row counts its records in the input and names its last one (exactly once)."""

    column: str = FLAG_STATE
    value_set: list[Any] = [True]  # noqa: RUF012
    description: str = (
        "state: each key's row counts the key's input records up to the checkpoints (less dead letters) and "
        "names its last one: every record applied once"
    )


STATE_ASSET = "state_"
"""A state's frame is the asset ``state_<name>``: one row per key."""


# check name in dq_results, per expectation type
CHECKS = {
    "expect_input_records_delivered": "no_loss",
    "expect_compound_columns_to_be_unique": "no_duplicates",
    "expect_rows_in_per_key_order": "key_order",
    "expect_rows_routed_to_their_bucket": "routing",
    "expect_column_values_to_not_be_null": "dead_letters",
    "expect_key_states_to_match_input": "state",
}

# asset name -> the columns that name an offending row in GX results
INDEX_COLUMNS = {
    "input_records": LINEAGE,
    "sink_rows": ["key_text", *LINEAGE, "virtual_task"],
    "dead_letters": ["key_text", *LINEAGE],
    STATE_ASSET: ["key_text", "input_records", "state_records"],
}


def build_suites(prefix: str = "elastic") -> dict[str, gx.ExpectationSuite]:
    """asset name -> suite; suite names are ``<prefix>.<asset>`` (the prefix is the job's name at run time)."""
    records = gx.ExpectationSuite(name=f"{prefix}.input_records")
    records.add_expectation(ExpectInputRecordsDelivered(column=FLAG_DELIVERED, value_set=[True]))
    rows = gx.ExpectationSuite(name=f"{prefix}.sink_rows")
    rows.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=LINEAGE))
    rows.add_expectation(ExpectRowsInPerKeyOrder(column=FLAG_IN_ORDER, value_set=[True]))
    rows.add_expectation(ExpectRowsRoutedToTheirBucket(column=FLAG_ROUTED, value_set=[True]))
    dead = gx.ExpectationSuite(name=f"{prefix}.dead_letters")
    # counted and reported: every dead letter must say why (its count is the result's element_count)
    dead.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="error"))
    return {"input_records": records, "sink_rows": rows, "dead_letters": dead}


def state_suite(prefix: str, state: str) -> gx.ExpectationSuite:
    """The suite of one state's frame (``<prefix>.state_<name>``)."""
    suite = gx.ExpectationSuite(name=f"{prefix}.{STATE_ASSET}{state}")
    suite.add_expectation(ExpectKeyStatesToMatchInput(column=FLAG_STATE, value_set=[True]))
    return suite


def suite_json(suite: gx.ExpectationSuite) -> dict[str, Any]:
    """A suite as stable JSON: no generated ids, so the saved files only change when the checks do."""
    data: dict[str, Any] = suite.to_json_dict()
    data.pop("id", None)
    for e in data["expectations"]:
        e.pop("id", None)
    data["meta"].pop("great_expectations_version", None)
    return data


def save_suites(directory: Path = INCLUDE) -> list[Path]:
    gx.get_context(mode="ephemeral")  # a suite needs an active context; this one writes nothing
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for asset, suite in {**build_suites(), f"{STATE_ASSET}NAME": state_suite("elastic", "NAME")}.items():
        path = directory / f"{asset}.json"
        path.write_text(json.dumps(suite_json(suite), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":  # python -m pipelines.quality.expectations: rewrite include/expectations/*.json
    for p in save_suites():
        print(p)
