"""The Spark fixtures themselves: the shared local session runs real jobs with the platform's JVM options."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.storage.home import Home

pytestmark = pytest.mark.integration


def test_spark_runs_map_in_arrow_and_keeps_partition_order(spark: Any) -> None:
    def tag(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        for batch in batches:
            yield pa.RecordBatch.from_arrays(
                [batch.column(0), pa.array([part] * batch.num_rows, pa.int32())], names=["id", "part"]
            )

    rows = spark.range(0, 40, 1, 4).mapInArrow(tag, "id LONG, part INT").collect()
    assert [r.id for r in rows] == list(range(40))
    assert [r.part for r in rows] == [i // 10 for i in range(40)]


def test_spark_python_workers_import_the_installed_compiled_pyspark_not_sparks_zip(spark: Any) -> None:
    import pyspark

    def where(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyspark

        for batch in batches:
            yield pa.RecordBatch.from_arrays([pa.array([pyspark.__file__] * batch.num_rows)], names=["f"])

    files = {r.f for r in spark.range(0, 4, 1, 2).mapInArrow(where, "f STRING").collect()}
    assert files == {pyspark.__file__}, "a zip on the path makes every new Python process compile pyspark again"


def test_the_jvm_compiles_with_c1_only_and_a_users_java_options_come_after_ours(spark: Any) -> None:
    import psutil

    from pipelines.runtime.session import JVM_OPTIONS
    from tests.integration.spark_fixtures import TEST_JVM_OPTIONS

    jvm = psutil.Process(spark.sparkContext._gateway.proc.pid).cmdline()
    assert JVM_OPTIONS in jvm, jvm
    extra = TEST_JVM_OPTIONS.split()[-1]  # this session's spark.driver.extraJavaOptions, the user's place
    assert jvm.index(JVM_OPTIONS) < jvm.index(extra), "the JVM takes the last of repeated flags: the user's"


def test_the_drivers_scratch_follows_tmpdir_as_every_other_tool_does(spark: Any) -> None:
    """The JVM ignores ``TMPDIR``; a killed driver left its ``spark-*`` and ``blockmgr-*`` folders in /tmp."""
    import tempfile

    assert tempfile.gettempdir() == os.environ["TMPDIR"] != "/tmp", "the test run has a temporary folder of its own"
    assert spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir") == tempfile.gettempdir()


def test_a_spark_home_the_user_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.runtime.session import SPARK_JARS, spark_env, spark_home

    made = spark_home()
    assert made is not None
    # beside the jars, whatever TMPDIR says: the drivers' class-data archive holds for this path only
    assert Path(made).parent == SPARK_JARS.parent, made
    assert (Path(made) / "jars").is_dir() and (Path(made) / "bin" / "spark-class").exists()
    assert not (Path(made) / "python").exists()
    monkeypatch.setenv("SPARK_HOME", "/opt/their-spark")
    spark_home.cache_clear()
    try:
        assert spark_home() is None
        assert spark_env()["SPARK_HOME"] == "/opt/their-spark"
    finally:
        spark_home.cache_clear()


def test_home_is_fresh_and_lazy(home: Home, tmp_path: Any) -> None:
    assert home.root.local_path().parent == tmp_path
    assert not home.root.local_path().exists()
