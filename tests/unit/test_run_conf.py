"""A run's conf names only its DAG's Params (``pipelines_airflow.run_conf``): what the refusal says."""

from __future__ import annotations

import pytest
from pipelines_airflow.run_conf import unknown_conf

pytestmark = pytest.mark.unit


def test_a_conf_of_declared_keys_or_none_fits() -> None:
    assert unknown_conf({"job": "enrichment", "factor": 4}, ["job", "factor", "reason"]) is None
    assert unknown_conf(None, ["job"]) is None and unknown_conf({}, []) is None


def test_unknown_keys_are_named_in_order_with_what_the_dag_takes() -> None:
    said = unknown_conf({"job": "e", "factr": 8, "dryrun": True}, ["job", "factor", "dry_run"])
    assert said == "unknown conf keys 'dryrun', 'factr': it takes dry_run, factor, job"
    assert unknown_conf({"x" * 500: 1}, ["job"]).startswith("unknown conf key 'xxx")  # type: ignore[union-attr]
    assert len(unknown_conf({"x" * 500: 1}, ["job"]) or "") < 120  # a pasted blob is cut, not echoed whole
    assert unknown_conf({"bogus": 1}, []) == "unknown conf key 'bogus': it takes no conf"
