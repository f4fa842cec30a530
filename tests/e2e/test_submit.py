"""A driver submitted by an Airflow task is set up on the submitting worker, for the master it is given."""

from __future__ import annotations

import json

import pytest
from pipelines_airflow.submit import connection_master, driver_confs, driver_env

from pipelines.errors import ConfigError
from pipelines.operations import keepalive
from pipelines.runtime.session import PACKAGE_ROOT

CLUSTER = {"conn_type": "spark", "host": "spark://spark-master", "port": 7077}


def test_a_driver_for_a_cluster_master_is_not_pinned_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)  # a worker of a cluster deployment sets none
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(CLUSTER))
    master = connection_master("spark_cluster")
    assert master == "spark://spark-master:7077"
    env = driver_env(master)
    assert env.get("SPARK_LOCAL_IP") != "127.0.0.1"  # executors on other hosts must reach it
    assert PACKAGE_ROOT in env["PYTHONPATH"].split(":")  # this worker's install, not the DAG parser's
    assert "spark.driver.host" not in driver_confs(master) and "spark.driver.bindAddress" not in driver_confs(master)
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")  # an operator's own choice for this host wins
    assert driver_env(master)["SPARK_LOCAL_IP"] == "10.1.2.3"


def test_a_driver_for_a_local_master_stays_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert driver_env("local[2]")["SPARK_LOCAL_IP"] == "127.0.0.1"
    confs = driver_confs("local[2]")
    assert (confs["spark.driver.host"], confs["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    assert "spark.master" not in confs  # spark-submit's --master comes from the connection


def test_keepalive_launches_unless_told_to_report() -> None:
    assert keepalive.launches({}) and keepalive.launches({"PIPELINES_KEEPALIVE": "launch"})
    assert not keepalive.launches({"PIPELINES_KEEPALIVE": " Report "})
    with pytest.raises(ConfigError, match="PIPELINES_KEEPALIVE='sometimes'"):
        keepalive.launches({"PIPELINES_KEEPALIVE": "sometimes"})
