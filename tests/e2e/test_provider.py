"""The installed ``elastic-pipelines-airflow`` distribution as Airflow finds it: a provider and a plugin.

Against the session's running Airflow (no plugins folder configured: everything comes through the
distribution's entry points), plus Airflow's own CLI, which reads the same installation.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.airflow_fixtures import AIRFLOW_BIN, REPO, AirflowClient, _child_env

PACKAGE = "elastic-pipelines-airflow"


def _airflow_cli(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [AIRFLOW_BIN, *args], env=env or _child_env(), capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, f"airflow {' '.join(args)} -> {result.returncode}\n{result.stderr[-3000:]}"
    return result.stdout


def test_the_pipelines_connection_type_is_in_airflows_connection_form(running_airflow: AirflowClient) -> None:
    hooks = running_airflow.json("GET", "/ui/connections/hook_meta")
    ours = [h for h in hooks if h["connection_type"] == "pipelines"]
    assert len(ours) == 1, [h["connection_type"] for h in hooks]
    meta = ours[0]
    assert meta["hook_class_name"] == "pipelines_airflow.hooks.PipelinesHook"
    assert meta["hook_name"] == "Elastic pipelines"
    home = meta["extra_fields"]["home"]  # the form's one field, where the deployment's home is
    assert home["schema"]["title"] == "Home" and "s3://" in home["description"]
    hidden = {name for name, field in (meta["standard_fields"] or {}).items() if field and field.get("hidden")}
    assert {"host", "port", "login", "password"} <= hidden, meta["standard_fields"]


def test_the_home_the_connection_form_stores_is_the_home_the_hook_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's form keeps its extra fields in the connection's extra under their names: ``{"home": ...}``."""
    from pipelines_airflow.hooks import PipelinesHook

    for extra in ({"home": str(tmp_path / "a")}, {"extra__pipelines__home": str(tmp_path / "a")}):
        monkeypatch.setenv("AIRFLOW_CONN_PIPELINES_FORM", json.dumps({"conn_type": "pipelines", "extra": extra}))
        assert PipelinesHook("pipelines_form").home().root.local_path() == tmp_path / "a"
    monkeypatch.setenv("PIPELINES_HOME", str(tmp_path / "b"))
    # no connection: the environment's
    assert PipelinesHook("no_such_connection").home().root.local_path() == tmp_path / "b"


def test_airflow_lists_the_provider_and_registers_the_plugin_once_from_its_entry_point(
    running_airflow: AirflowClient,
) -> None:
    providers = {p["package_name"]: p for p in running_airflow.json("GET", "/api/v2/providers")["providers"]}
    assert PACKAGE in providers, sorted(providers)
    listed = {p["package_name"] for p in json.loads(_airflow_cli("providers", "list", "-o", "json"))}
    assert PACKAGE in listed
    triggers = json.loads(_airflow_cli("providers", "triggers", "-o", "json"))
    assert any(t["class"] == "pipelines_airflow.triggers" for t in triggers), triggers

    plugins = [p for p in running_airflow.json("GET", "/api/v2/plugins")["plugins"] if p["name"] == "elastic_pipelines"]
    assert len(plugins) == 1 and f"{PACKAGE}==" in plugins[0]["source"], plugins
    # A plugins folder pointed at plugins/ (an older configuration) adds nothing: the package in it is ignored
    # (plugins/.airflowignore), so the plugin is not registered a second time, which Airflow would refuse.
    env = {**_child_env(), "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins")}
    listed_plugins = json.loads(_airflow_cli("plugins", "-o", "json", env=env))
    ours = [p for p in listed_plugins if p["name"] == "elastic_pipelines"]
    assert len(ours) == 1 and PACKAGE in str(ours[0]["source"]), ours
    assert os.environ.get("AIRFLOW__CORE__PLUGINS_FOLDER") is None  # the test Airflow itself has no plugins folder
