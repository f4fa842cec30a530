"""Which master URLs are refused before a JVM starts: Spark's own patterns, so nothing Spark runs is refused."""

from __future__ import annotations

import pytest

from pipelines.errors import PipelinesError
from pipelines.runtime.launcher import default_master
from pipelines.runtime.lifetime import check_master, master_problem

SPARK_STARTS_WITH = [
    "local",
    "local[1]",
    "local[16]",
    "local[*]",
    "local[2,3]",
    "local[2147483647]",  # Java's Integer.MAX_VALUE, the most Spark's toInt reads
    "local[*, 4]",
    "local-cluster[2, 1, 1024]",
    "spark://10.0.0.1:7077",
    "spark://a:7077,b:7077",
    "k8s://https://10.0.0.1:6443",
    "yarn",
]


@pytest.mark.parametrize("master", SPARK_STARTS_WITH)
def test_every_form_spark_starts_with_passes(master: str) -> None:
    assert master_problem(master) is None


@pytest.mark.parametrize(
    ("master", "reason"),
    [
        ("bogus://x", "is not one Spark starts with: use local, local[N]"),
        ("", "is not one Spark starts with"),
        ("Local[2]", "is not one Spark starts with"),  # SparkSubmit compares case-sensitively
        ("local[abc]", "is not one Spark starts with"),
        ("local[2]x", "is not one Spark starts with"),
        ("local[-1]", "is not one Spark starts with"),
        ("yarnx", "is not one Spark starts with"),
        ("local[0]", "asks for no thread"),
        ("spark://", "names no host"),
        ("k8s://  ", "names no host"),
        ("local[2147483648]", "holds a number above 2,147,483,647"),  # Spark's toInt: NumberFormatException
        ("local[99999999999]", "holds a number above 2,147,483,647"),
        ("local[4, 99999999999]", "holds a number above 2,147,483,647"),
        ("local-cluster[2, 1, 99999999999]", "holds a number above 2,147,483,647"),
    ],
)
def test_what_spark_would_refuse_is_named(master: str, reason: str) -> None:
    problem = master_problem(master)
    assert problem is not None and repr(master) in problem and reason in problem


def test_a_number_of_thousands_of_digits_is_refused_in_one_line_that_quotes_it_cut() -> None:
    problem = master_problem(f"local[{'9' * 5000}]")
    assert problem is not None and "holds a number above" in problem and len(problem) < 200


def test_check_master_refuses_the_form_before_any_connection() -> None:
    with pytest.raises(PipelinesError, match=r"'bogus://x' is not one Spark starts with.*; nothing was started"):
        check_master("bogus://x", timeout_s=0.001)
    check_master("local[2]", timeout_s=0.001)  # local: no connection, no refusal


def test_the_operations_default_master_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPELINES_SPARK_MASTER", raising=False)
    assert default_master() == "local[*]"
    monkeypatch.setenv("PIPELINES_SPARK_MASTER", "local[3]")
    assert default_master() == "local[3]"
    monkeypatch.setenv("PIPELINES_SPARK_MASTER", "spark//10.0.0.1:7077")
    with pytest.raises(PipelinesError, match=r"^\$PIPELINES_SPARK_MASTER: Spark master 'spark//10.0.0.1:7077'"):
        default_master()
