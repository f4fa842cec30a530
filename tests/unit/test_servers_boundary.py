"""``pipelines/servers/`` (local brokers and emulators for tests, the demo, benchmarks) stays out of the platform.

A deployment runs no test broker: a module of the platform that imported one
would drag its JVM jars or Node install into every Spark worker and Airflow
task. Only the demo (which starts its own servers) may import them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pipelines"
ALLOWED = ("servers", "demo")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_module_of_the_platform_imports_the_local_servers() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in _imports(path) if n.startswith("pipelines.servers"))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in ALLOWED
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert _imports(PACKAGE / "demo" / "run.py") >= {"pipelines.servers.kafka_broker"}, "the check sees imports"
