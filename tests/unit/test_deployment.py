"""The deployment files hold the settings the code depends on; no Docker engine runs here, so they are read.

``docker-compose.yaml`` is loaded with PyYAML and ``Dockerfile`` read as text: a driver must be a long-lived
service with an address its executors reach, every Spark and Airflow process must see the same home (and the
AWS variables an S3 home needs), and every image must carry the Airflow provider.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HOME_MOUNT = "/data/pipelines-home"
AWS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ALLOW_HTTP",
)
"""What an S3 home is configured by (docs of the storage layer); compose passes each through when it is set."""
MASTER = "spark://spark-master:7077"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())["services"]


def _ours(services: dict[str, Any]) -> dict[str, Any]:
    """Every service that runs our image: Airflow's, Spark's, the drivers and the CLI."""
    return {name: s for name, s in services.items() if s.get("image") == "elastic-pipelines:latest"}


def _submit_opts(service: dict[str, Any]) -> dict[str, str]:
    """The ``-Dspark.*`` confs in ``SPARK_SUBMIT_OPTS``, which a client-mode driver's SparkConf reads."""
    opts = shlex.split(service["environment"].get("SPARK_SUBMIT_OPTS") or "")
    return dict(o.removeprefix("-D").split("=", 1) for o in opts if o.startswith("-Dspark."))


def test_a_driver_is_a_long_lived_service_running_the_job_in_the_foreground(services: dict[str, Any]) -> None:
    driver = services["driver-enrichment"]
    command = driver["command"]
    assert command[:4] == ["python", "-m", "pipelines", "run"] and command[4] == "enrichment"
    assert "--detach" not in command and "--available-now" not in command  # the service's process is the driver's
    assert command[command.index("--master") + 1] == MASTER
    assert driver["restart"] == "on-failure"  # a crash restarts it; `pipelines stop` (exit 0) leaves it stopped
    # Docker's stop is SIGINT, which the CLI turns into a stop at a batch boundary, given more than the 60 s the
    # CLI waits for it (launcher.INTERRUPT_GRACE_S) before it kills the driver
    from pipelines.runtime.launcher import INTERRUPT_GRACE_S

    assert driver["stop_signal"] == "SIGINT"
    assert float(driver["stop_grace_period"].removesuffix("s")) > INTERRUPT_GRACE_S
    assert "--detach" not in str(services["cli"].get("command", ""))


def test_the_driver_advertises_its_service_name_on_fixed_exposed_ports(services: dict[str, Any]) -> None:
    driver = services["driver-enrichment"]
    name = driver["hostname"]
    assert name == "driver-enrichment"  # the service name: what the compose network resolves
    confs = _submit_opts(driver)
    assert confs["spark.driver.host"] == name and driver["environment"]["SPARK_LOCAL_HOSTNAME"] == name
    # no bindAddress: Spark binds the address spark.driver.host resolves to (the compose network's), not every one
    assert "spark.driver.bindAddress" not in confs
    assert "SPARK_LOCAL_IP" not in driver["environment"] or driver["environment"]["SPARK_LOCAL_IP"] != "127.0.0.1"
    ports = {confs["spark.driver.port"], confs["spark.blockManager.port"]}
    assert len(ports) == 2 and all(p.isdigit() for p in ports)
    assert ports <= {str(p) for p in driver["expose"]}


def test_drivers_started_by_airflow_tasks_advertise_the_scheduler_container(services: dict[str, Any]) -> None:
    """The LocalExecutor runs tasks in the scheduler's container: a catch-up run's driver lives there."""
    scheduler = services["airflow-scheduler"]
    confs = _submit_opts(scheduler)
    assert confs["spark.driver.host"] == scheduler["hostname"] == scheduler["environment"]["SPARK_LOCAL_HOSTNAME"]
    assert "spark.driver.bindAddress" not in confs  # the container's own name's address, not every interface
    for name, service in _ours(services).items():
        assert service["environment"].get("SPARK_LOCAL_IP") != "127.0.0.1", name  # no loopback on a cluster


def test_every_spark_and_airflow_service_shares_the_home_and_passes_the_aws_variables(
    services: dict[str, Any],
) -> None:
    ours = _ours(services)
    expected = {
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "spark-master",
        "spark-worker",
        "driver-enrichment",
        "cli",
    }
    assert expected <= set(ours)
    for name, service in ours.items():
        env = service["environment"]
        assert env["PIPELINES_HOME"] == f"${{PIPELINES_HOME:-{HOME_MOUNT}}}", name
        assert f"pipelines-home:{HOME_MOUNT}" in service["volumes"], name
        assert env["PIPELINES_SPARK_MASTER"] == MASTER, name
        # passed through from the shell or .env when set, left unset otherwise (a null value in compose)
        assert all(key in env and env[key] is None for key in AWS), name
        assert env["PIPELINES_KEEPALIVE"] == "report", name  # the driver services keep the jobs running
    assert "airflow" in ours["airflow-triggerer"]["command"] and "triggerer" in ours["airflow-triggerer"]["command"]


def test_spark_workers_can_be_scaled(services: dict[str, Any]) -> None:
    worker = services["spark-worker"]
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    assert worker["command"][-1] == MASTER
    text = (REPO / "docker-compose.yaml").read_text()
    assert "docker compose up -d --scale spark-worker=" in text


def test_the_services_that_hold_adjunct_stores_get_room_for_them_in_dev_shm(services: dict[str, Any]) -> None:
    # Docker's default /dev/shm is 64 MiB, about a million entries of ~57 MB per million: the stores' sizes
    # (README, "Adjunct stores on every executor host") need more on every host that serves them.
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    for name in ("spark-worker", "driver-enrichment"):
        size = str(services[name].get("shm_size", "64m")).lower().rstrip("b")
        room = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        assert room >= 2**30, f"{name}: shm_size {services[name].get('shm_size')} holds under 1 GiB"


def test_the_image_installs_the_airflow_provider_and_configures_no_plugins_folder() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    installs = re.findall(r"pip install [^\n\\]*--no-deps -e (\S+)", dockerfile)
    assert installs == [".", "plugins"], installs
    assert dockerfile.index("COPY plugins ./plugins") < dockerfile.index("-e plugins")
    assert "PLUGINS_FOLDER" not in dockerfile  # the plugin comes from the distribution's entry point, once
    setup = (REPO / "scripts" / "setup.sh").read_text()
    # both installers (uv, and pip when uv fails) install the platform and the plugin editable, nothing else
    assert re.findall(r"--no-deps -e \S+ -e \S+", setup) == ["--no-deps -e . -e plugins"] * 2
    assert "plugins/pyproject.toml" in setup
    assert "PLUGINS_FOLDER" not in (REPO / "scripts" / "airflow.sh").read_text()
    assert "export SPARK_LOCAL_IP" not in (REPO / "scripts" / "airflow.sh").read_text()  # no loopback for a cluster


def test_the_provider_distribution_declares_its_entry_points() -> None:
    import tomllib

    project = tomllib.loads((REPO / "plugins" / "pyproject.toml").read_text())["project"]
    assert project["name"] == "elastic-pipelines-airflow"
    points = project["entry-points"]
    assert points["apache_airflow_provider"] == {"provider_info": "pipelines_airflow.provider:get_provider_info"}
    assert points["airflow.plugins"] == {"elastic_pipelines": "pipelines_airflow.plugin:ElasticPipelinesPlugin"}
