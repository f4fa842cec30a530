"""Spark across hosts: a driver on a host of its own runs Python tasks on the executors of two worker hosts."""

from __future__ import annotations

import json

import pytest

from testbed.hosts import Cluster
from testbed.spark import SparkCluster, driver_confs, run_driver

pytestmark = pytest.mark.slow

# The driver's address comes from pipelines.runtime.session alone (build_session with a spark:// master): no
# spark.driver.host here. Loopback there made every executor fail with "Connection refused: localhost".
JOB = """
import json, socket, sys
from pyspark.sql.functions import udf
from pipelines.runtime.session import build_session

spark = build_session(sys.argv[1], "cluster-smoke", **json.loads(sys.argv[2]))

def tagged(rows):  # a Python worker on an executor: its host's name
    import socket, time
    for row in rows:
        time.sleep(0.02)  # slow enough that both executors get tasks
        yield row.id, row.doubled, row.udf_host, socket.gethostname()

host_udf = udf(lambda _: socket.gethostname(), "string")  # a SQL Python UDF, also on the executors
frame = spark.range(0, 100, 1, 8).selectExpr("id", "id * 2 AS doubled").withColumn("udf_host", host_udf("id"))
rows = frame.rdd.mapPartitions(tagged).collect()
conf = spark.sparkContext.getConf()
print(json.dumps({
    "ids": sorted(r[0] for r in rows),
    "sum": sum(r[1] for r in rows),
    "udf_hosts": sorted({r[2] for r in rows}),
    "map_hosts": sorted({r[3] for r in rows}),
    "driver": [socket.gethostname(), conf.get("spark.driver.host"), conf.get("spark.driver.bindAddress", "")],
    "app": spark.sparkContext.applicationId,
}))
spark.stop()
"""


def test_a_driver_on_its_own_host_runs_python_tasks_on_both_worker_hosts(
    cluster: Cluster, spark_cluster: SparkCluster
) -> None:
    driver = cluster["driver1"]
    done = run_driver(driver, JOB, spark_cluster.url, json.dumps(driver_confs(cores=2)), cluster=spark_cluster)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ids"] == list(range(100))
    assert result["sum"] == sum(2 * i for i in range(100))
    assert result["udf_hosts"] == ["worker1", "worker2"] == result["map_hosts"]
    assert result["driver"] == ["driver1", driver.ip, ""]  # its own routable address, not loopback
    finished = {app["id"]: app["state"] for app in spark_cluster.state()["completedapps"]}
    assert finished.get(result["app"]) == "FINISHED"
