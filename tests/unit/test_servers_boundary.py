"""The local servers (``testbed/``) stay out of the installed platform.

A deployment runs no test broker: a module of the platform that imported one
would fail where only the wheel is installed, or drag a JVM's jars or a Node
install into every Spark worker and Airflow task. Only the demo, which starts
its own servers from a checkout, may import them, and only inside
``from_testbed`` (a clear error without a checkout). docs/layout.md.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from setuptools import find_namespace_packages

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipelines"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_module_of_the_platform_imports_the_testbed() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(n for n in _imports(path) if n.split(".")[0] == "testbed")
        for root in (PACKAGE, ROOT / "plugins", ROOT / "dags")
        for path in root.rglob("*.py")
        if path.relative_to(ROOT).parts[:2] != ("pipelines", "demo")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert _imports(PACKAGE / "demo" / "run.py") >= {"testbed.servers.kafka_broker"}, "the check sees imports"


def test_the_wheel_holds_the_platform_and_not_the_testbed() -> None:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    packages = set(find_namespace_packages(str(ROOT), **find["find"]))  # what the wheel's build finds
    assert {"pipelines", "pipelines.demo", "pipelines.systems.kafka"} <= packages
    assert not {p for p in packages if p.startswith("testbed") or p == "pipelines.servers"}
