"""Our source in Spark's source runner process: its stop and its start.

A query's stop does not print Spark's source-runner tracebacks into the driver's log.

Spark stops a Python streaming source's runner process by closing its socket
and then killing it; a runner that reads the closed socket first printed an
``EOFError`` and a ``BrokenPipeError`` traceback into the driver's output at
a clean stop, a rescale or a Ctrl-C (CI caught one in the Ctrl-C test). The
test plays the JVM's side of the runner's socket, as Spark does, with our
source, and closes it where Spark's stop does: waiting for the next call.

A query's start does not import pandas in the runner: Spark starts the
runner afresh for every query (every job start, every in-place rescale),
and pyarrow imported pandas there only to ask whether values were
DataFrames, a third of the runner's start. Nor does it load pydantic: the
job configuration it reads was validated when its model was saved.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from pyspark.serializers import CloudPickleSerializer, SpecialLengths, read_int, write_int, write_with_length
from pyspark.sql.streaming.python_streaming_source_runner import (
    GET_DEFAULT_READ_LIMIT_FUNC_ID,
    INITIAL_OFFSET_FUNC_ID,
    LATEST_OFFSET_ADMISSION_CONTROL_FUNC_ID,
    PREPARE_FOR_TRIGGER_AVAILABLE_NOW_FUNC_ID,
)

from pipelines.runtime import schemas
from pipelines.runtime.source import ElasticSource
from pipelines.storage.home import Home
from tests.integration.runtime.jobs import job, produce

REPO = Path(__file__).resolve().parents[3]


def _utf8(text: str, out) -> None:
    write_with_length(text.encode("utf-8"), out)


def _runner_until_ready(tmp_path: Path, source: object) -> tuple[subprocess.Popen, socket.socket, object]:
    """Start Spark's source runner with ``source``; returns once it waits for its first call."""
    path = tempfile.mkdtemp(prefix="runner-") + "/s"  # short: a unix socket's path has at most 107 bytes
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    env = {**os.environ, "PYTHON_WORKER_FACTORY_SOCK_PATH": path, "PYTHONPATH": str(REPO)}
    env.pop("PYTHON_WORKER_FACTORY_SECRET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyspark.sql.streaming.python_streaming_source_runner"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server.settimeout(60)
    try:
        conn, _ = server.accept()
    except OSError:
        proc.kill()
        raise
    finally:
        server.close()
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    stream = conn.makefile("rwb", 65536)
    read_int(stream)  # the runner's pid
    _utf8(f"{sys.version_info[0]}.{sys.version_info[1]}", stream)  # check_python_version
    _utf8(str(tmp_path), stream)  # setup_spark_files: the work dir, no includes
    write_int(0, stream)
    write_with_length(CloudPickleSerializer().dumps(source), stream)
    _utf8(schemas.TASKS.json(), stream)
    write_int(1024, stream)  # max arrow batch size
    stream.flush()
    conn.settimeout(60)
    assert read_int(stream) == 0, proc.stderr.read() if proc.poll() is not None else "runner failed to start"
    return proc, conn, stream


def test_a_runner_whose_query_stopped_ends_without_a_traceback(tmp_path: Path) -> None:
    source = ElasticSource({"home": str(tmp_path / "home"), "job": "j", "modelVersion": "1"})
    proc, conn, stream = _runner_until_ready(tmp_path, source)
    time.sleep(0.2)  # the runner now blocks reading its next call, as between two batches
    stream.close()
    conn.close()  # what Spark's stop does before it kills the runner
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 0, (proc.returncode, err)


def test_an_error_in_our_reader_still_reaches_spark(tmp_path: Path) -> None:
    """The quiet end is only for the closed socket: a failing call still reports its error to the JVM."""
    source = ElasticSource({"home": str(tmp_path / "missing-home"), "job": "nobody", "modelVersion": "1"})
    proc, conn, stream = _runner_until_ready(tmp_path, source)
    try:
        with pytest.raises(RunnerError, match="nobody"):  # the model of job "nobody" cannot be read
            _call(stream, INITIAL_OFFSET_FUNC_ID)
    finally:
        stream.close()
        conn.close()
        proc.communicate(timeout=60)


class RunnerError(Exception):
    """The runner answered a call with ``PYTHON_EXCEPTION_THROWN`` and this message."""


def _call(stream, func_id: int, *args: str) -> str | int:
    """One call of the runner's protocol, as the JVM makes it: its JSON answer, or its status if it has none."""
    write_int(func_id, stream)
    for arg in args:
        _utf8(arg, stream)
    stream.flush()
    length = read_int(stream)
    if length == SpecialLengths.PYTHON_EXCEPTION_THROWN:
        raise RunnerError(stream.read(read_int(stream)).decode("utf-8", "replace"))
    if func_id == PREPARE_FOR_TRIGGER_AVAILABLE_NOW_FUNC_ID:
        return length
    return stream.read(length).decode("utf-8")


def test_a_runner_plans_a_batch_without_importing_pandas(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    produce(home, "events", 200, 20)
    job(home, "planned", 4)
    source = ElasticSource({"home": str(home.root), "job": "planned", "modelVersion": "1", "maxRecords": "100"})
    proc, conn, stream = _runner_until_ready(tmp_path, source)
    try:
        start = _call(stream, INITIAL_OFFSET_FUNC_ID)
        assert _call(stream, PREPARE_FOR_TRIGGER_AVAILABLE_NOW_FUNC_ID) == 0
        limit = _call(stream, GET_DEFAULT_READ_LIMIT_FUNC_ID)
        end = _call(stream, LATEST_OFFSET_ADMISSION_CONTROL_FUNC_ID, str(start), str(limit))
        assert json.loads(str(end)) != json.loads(str(start)), "the runner planned no batch over 200 waiting records"
        mapped = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "pyarrow" in mapped  # the planning ran pyarrow in this process
        assert "pandas/_libs" not in mapped, "the source runner imported pandas"
        assert "pydantic_core" not in mapped, "the source runner loaded pydantic to read a saved job configuration"
    finally:
        stream.close()
        conn.close()
        proc.communicate(timeout=60)
