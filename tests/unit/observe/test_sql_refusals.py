"""What ``pipelines sql`` refuses before it starts a Spark session, and what it leaves to Spark's parser."""

from __future__ import annotations

import pytest

from pipelines.observe.sql import ONLY_QUERIES, SqlError, refuse_before_spark


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "-- nothing but a comment", "/* a */ -- b\n  "])
def test_no_statement_is_refused_as_no_query(query: str) -> None:
    with pytest.raises(SqlError, match=r"^no query given: pass one, e\.g\. 'SELECT"):
        refuse_before_spark(query)


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE checkpoints",
        "insert into metrics values (1)",
        "  /* why */ DELETE FROM scaling_locks",
        "-- tidy up\nOPTIMIZE checkpoints",
        "VACUUM job_models",
        "MERGE INTO a USING b ON a.x = b.x WHEN MATCHED THEN DELETE",
        "TRUNCATE TABLE dq_results",
        "SET spark.sql.shuffle.partitions=1",
        "update(metrics) set x = 1",
    ],
)
def test_a_statement_that_writes_is_refused_unrun(query: str) -> None:
    with pytest.raises(SqlError) as refused:
        refuse_before_spark(query)
    assert str(refused.value) == ONLY_QUERIES


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM checkpoints",
        "  with t as (select 1) select * from t",
        "(SELECT 1)",
        "VALUES (1)",
        "SHOW TABLES",
        "DESCRIBE metrics",
        "EXPLAIN SELECT 1",
        "settings",  # a word that starts like SET is Spark's parser's to judge, not ours
        "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",  # a write behind WITH: the parser's check refuses it
    ],
)
def test_what_may_be_a_read_is_left_to_sparks_parser(query: str) -> None:
    refuse_before_spark(query)
