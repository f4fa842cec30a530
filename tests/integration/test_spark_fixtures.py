"""The Spark fixtures themselves: the shared local session and the standalone cluster run real jobs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.control.home import Home
from tests.integration.spark_fixtures import MasterUrl, fast_jvm_confs, run_on_cluster

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


def test_a_spark_home_the_user_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.runtime.session import spark_env, spark_home

    made = spark_home()
    assert made is not None
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


# A separate driver process: the pytest process may already own the local ``spark`` SparkContext.
CLUSTER_JOB = """
import json, sys
from pyspark.sql import SparkSession
from pipelines.runtime.session import spark_confs

builder = SparkSession.builder.appName(sys.argv[2])
for key, value in {**spark_confs(sys.argv[1]), **json.loads(sys.argv[3])}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
total = spark.range(100).groupBy().sum("id").collect()[0][0]

def buckets(batches):  # runs in a Python worker on the cluster's executor: needs PYTHONPATH for pipelines
    import pyarrow as pa
    from pipelines.core.hashing import key_bucket
    for b in batches:
        yield pa.RecordBatch.from_arrays(
            [pa.array([key_bucket(str(i).encode(), i, 4) for i in b.column(0).to_pylist()], pa.int32())], names=["b"]
        )

in_range = all(0 <= r.b < 4 for r in spark.range(0, 20, 1, 2).mapInArrow(buckets, "b INT").collect())
print(json.dumps({"sum": total, "in_range": in_range, "app_id": spark.sparkContext.applicationId}))
spark.stop()
"""


def test_standalone_cluster_runs_a_job_from_a_subprocess(spark_standalone: MasterUrl) -> None:
    assert spark_standalone.startswith("spark://127.0.0.1:")
    assert spark_standalone.state()["aliveworkers"] >= 1
    args = (str(spark_standalone), "fixture-smoke", json.dumps(fast_jvm_confs()))
    done = run_on_cluster(spark_standalone, CLUSTER_JOB, *args)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["sum"] == sum(range(100))
    assert result["in_range"] is True

    deadline = time.monotonic() + 20  # the master moves the app to "completed" shortly after spark.stop()
    while True:
        state = spark_standalone.state()
        apps = {a["id"]: a for a in state.get("completedapps", []) + state.get("activeapps", [])}
        if result["app_id"] in apps or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert result["app_id"] in apps, state
    assert apps[result["app_id"]]["name"] == "fixture-smoke"
