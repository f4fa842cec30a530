"""Our Airflow-connection reader parses ``AIRFLOW_CONN_<ID>`` exactly as Airflow does, for both forms.

Spark executors read the variable without Airflow, so the parser is ours; this
compares it with Airflow's own ``Connection.from_uri`` / ``from_json`` on the
same strings. Airflow runs in a child process with a throwaway home, so this
test's import of Airflow cannot configure the e2e tests' in-process Airflow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from pipelines.systems.connections import parse_connection

pytestmark = pytest.mark.integration

SAMPLES = [
    "aws://AKIA%2FX:se%40cret@/?region_name=eu-west-1&aws_session_token=tok",
    "aws://id:secret@",
    "kafka://?__extra__=" + quote(json.dumps({"bootstrap.servers": "b:9092", "sasl.password": "p"})),
    "kafka://b1:9092/?security.protocol=SASL_SSL&empty=",
    "postgresql://u:p@Db.Example.com:5432/my%20db",
    "http-api://https://api.example.com:8443/v1",
    "spark://spark-master:7077",
    "generic://user@host%2Fwith%2Fslashes:1234/schema?a=1&a=2",
    json.dumps({"conn_type": "aws", "login": "id", "password": "s", "extra": {"region_name": "eu-west-1"}}),
    json.dumps({"conn_type": "kafka", "extra": json.dumps({"bootstrap.servers": "b:9092"}), "port": "9092"}),
    json.dumps({"conn_type": "spark", "host": "local[2]"}),
]

_AIRFLOW = """
import json, sys
from airflow.sdk import Connection
out = []
for raw in json.loads(sys.stdin.read()):
    c = Connection.from_json(raw, conn_id="x") if raw.startswith("{") else Connection.from_uri(raw, conn_id="x")
    out.append([c.conn_type, c.host, c.port, c.schema, c.login, c.password, c.extra_dejson])
print(json.dumps(out))
"""


def test_both_forms_parse_as_airflow_parses_them(tmp_path: Path) -> None:
    env = {"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run(
        [sys.executable, "-c", _AIRFLOW],
        input=json.dumps(SAMPLES),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for raw, expected in zip(SAMPLES, theirs, strict=True):
        conn = parse_connection("x", raw)
        ours = [conn.conn_type, conn.host, conn.port, conn.schema, conn.login, conn.password, dict(conn.extra)]
        assert ours == [v or None if i < 6 else v for i, v in enumerate(expected)], raw
