"""Spark's checkpoint on an S3 store through s3a, configured only by the standard AWS variables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from pipelines.runtime.session import PACKAGE_ROOT, spark_env
from testbed.servers.s3 import S3Server
from tests.integration.spark_fixtures import fast_jvm_confs

pytestmark = pytest.mark.integration

# A driver of its own: the AWS variables must be in its environment when its session starts, as they are in a
# `pipelines run` driver's; the shared test session started without them.
DRIVER = """
import json, sys
from pathlib import Path

import psutil

from pipelines.runtime.session import build_session

source, checkpoint, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spark = build_session("local[1]", "s3a-checkpoint", **extra)
batches = []


def run():  # a new query each time: it starts from what the checkpoint on S3 holds
    query = (
        spark.readStream.format("text").load(source).writeStream
        .foreachBatch(lambda frame, batch: batches.append([batch, sorted(r.value for r in frame.collect())]))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


Path(source, "a.txt").write_text("one\\ntwo\\n")
run()
Path(source, "b.txt").write_text("three\\n")
run()
run()  # nothing new: no batch
secret = sys.argv[4]
jvm = psutil.Process(spark.sparkContext._gateway.proc.pid).cmdline()
confs = spark.sparkContext.getConf().getAll()
print(json.dumps({
    "batches": batches,
    "secret_in_jvm_command": any(secret in arg for arg in jvm),
    "secret_in_confs": any(secret in value for _, value in confs),
    "s3a": {k: v for k, v in confs if k.startswith("spark.hadoop.fs.s3a.")},
}))
spark.stop()
"""


def _drive(args: list[str], env: dict[str, str], timeout: float = 300.0) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args],
        env=env,
        cwd=PACKAGE_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, f"driver exited with {proc.returncode}\n{out[-3000:]}\n{err[-5000:]}"
    return json.loads(out.strip().splitlines()[-1])


def test_a_streaming_query_checkpoints_on_s3_and_restarts_from_it(s3_server: S3Server, tmp_path) -> None:
    bucket = s3_server.create_bucket()
    source = tmp_path / "source"
    source.mkdir()
    env = {**spark_env(), **s3_server.env(), "PYTHONUNBUFFERED": "1"}
    checkpoint = f"s3a://{bucket}/home/spark/job/v1"

    result = _drive([str(source), checkpoint, json.dumps(fast_jvm_confs()), s3_server.secret_key], env)

    assert result["batches"] == [[0, ["one", "two"]], [1, ["three"]]], "the restarted query resumed at batch 1"
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="home/spark/job/v1/")
    keys = {o["Key"].removeprefix("home/spark/job/v1/") for o in listed.get("Contents", [])}
    assert {"metadata", "offsets/0", "offsets/1", "commits/0", "commits/1", "sources/0/0", "sources/0/1"} <= keys
    assert "offsets/2" not in keys, "the third query found nothing new and wrote no batch"
    ours = {
        "spark.hadoop.fs.s3a.endpoint": s3_server.endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": s3_server.region,
    }
    assert {k: result["s3a"].get(k) for k in ours} == ours  # (Spark adds vectored-read defaults of its own)
    assert not result["secret_in_jvm_command"] and not result["secret_in_confs"], "keys come from the environment"
