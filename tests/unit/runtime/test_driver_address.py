"""The driver's address: loopback for local masters, a routable one for a cluster's (tests/cluster runs it)."""

from __future__ import annotations

import pytest

from pipelines.runtime.session import LOOPBACK, driver_address, spark_confs, spark_env


@pytest.fixture(autouse=True)
def _no_address_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_HOSTNAME", raising=False)


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "local"])
def test_local_masters_get_loopback_whatever_the_environment(master: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert driver_address(master) == LOOPBACK
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    assert driver_address(master) == LOOPBACK
    assert spark_confs(master)["spark.driver.host"] == LOOPBACK


@pytest.mark.parametrize(
    "master", ["spark://127.0.0.1:7077", "spark://localhost:7077", "spark://127.0.0.1:7077,10.9.9.9:7077"]
)
def test_a_master_on_loopback_is_reached_from_loopback(master: str) -> None:
    assert driver_address(master) == LOOPBACK


def test_kubernetes_master_url_is_parsed_for_its_host() -> None:
    assert driver_address("k8s://https://127.0.0.1:6443") == LOOPBACK


def test_spark_local_ip_wins_for_a_cluster_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    assert driver_address("spark://127.0.0.1:7077") == "10.1.2.3"
    assert driver_address("yarn") == "10.1.2.3"


@pytest.mark.parametrize("master", ["yarn", "spark://:7077", "spark://host:port", "spark://no-such-host.invalid:7077"])
def test_no_address_when_there_is_no_master_host_to_route_to(master: str) -> None:
    assert driver_address(master) is None


def test_spark_env_sets_the_cluster_address_as_a_default_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipelines.runtime.session.driver_address", lambda master: "10.77.0.13")
    env = spark_env("spark://10.77.0.10:7077")
    assert (env["SPARK_LOCAL_IP"], env["SPARK_LOCAL_HOSTNAME"]) == ("10.77.0.13", "10.77.0.13")
    monkeypatch.setenv("SPARK_LOCAL_HOSTNAME", "driver.example")
    assert spark_env("spark://10.77.0.10:7077")["SPARK_LOCAL_HOSTNAME"] == "driver.example"


def test_without_a_master_the_environment_stays_on_loopback() -> None:
    env = spark_env()
    assert env["SPARK_LOCAL_IP"] == LOOPBACK and "SPARK_LOCAL_HOSTNAME" not in env
    assert spark_env("local[*]")["SPARK_LOCAL_IP"] == LOOPBACK


def test_a_cluster_master_gets_no_driver_address_conf_so_the_users_spark_conf_wins() -> None:
    confs = spark_confs("spark://10.77.0.10:7077")
    assert "spark.driver.host" not in confs and "spark.driver.bindAddress" not in confs
