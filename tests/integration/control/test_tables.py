"""The control plane on real Delta tables in a temporary home."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.control import ControlPlane, Home, resolve_home
from pipelines.control.checkpoints import CHECKPOINTS
from pipelines.control.job_models import JOB_MODELS
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.control.table import utc_now
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.groupers import plan_job_model
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.errors import ConfigError, ModelError, UnknownJobError
from tests.skew import SkewedHost

pytestmark = pytest.mark.integration

EVENTS = SystemStream("deltalog", "events")


def ssp(partition: int, bucket: int | None = None) -> SystemStreamPartition:
    return SystemStreamPartition("deltalog", "events", partition, bucket)


def model(version: int, factor: int = 1, partitions: int = 2, job: str = "orders") -> JobModel:
    return plan_job_model(job, version, {EVENTS: partitions}, factor=factor)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home")


@pytest.fixture
def cp(home: Home) -> ControlPlane:
    return ControlPlane(home)


def test_home_layout_and_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PIPELINES_HOME", raising=False)
    assert resolve_home(None).root.local_path() == tmp_path / ".pipelines-home"
    monkeypatch.setenv("PIPELINES_HOME", "from-env")
    assert resolve_home(None).root.local_path() == tmp_path / "from-env"
    home = resolve_home(str(tmp_path / "cli"))
    assert home.root.local_path() == tmp_path / "cli"
    assert tuple(p.local_path() for p in (home.streams, home.control, home.spark_checkpoints, home.sinks)) == tuple(
        tmp_path / "cli" / d for d in ("streams", "control", "spark", "sinks")
    )
    (tmp_path / "a-file").write_text("not a home")
    with pytest.raises(ConfigError, match=r"--home '.*a-file' is a file, not a directory"):
        resolve_home(str(tmp_path / "a-file"))
    monkeypatch.setenv("PIPELINES_HOME", "a-file")
    with pytest.raises(ConfigError, match=r"\$PIPELINES_HOME 'a-file' is a file"):
        resolve_home(None)


def test_empty_home_reads_without_creating_tables(cp: ControlPlane, home: Home) -> None:
    assert cp.job_models.jobs() == []
    assert cp.job_models.active_version("orders") is None
    assert cp.job_models.latest_version("orders") is None
    assert not home.control.local_path().exists()


def test_save_activate_and_read_back(cp: ControlPlane, home: Home) -> None:
    m1 = model(1, factor=2)
    cp.job_models.save(m1, "first deployment")
    assert cp.job_models.active_version("orders") is None
    cp.job_models.activate("orders", 1)
    assert cp.job_models.active_version("orders") == 1
    assert cp.job_models.active("orders") == m1
    assert cp.job_models.get("orders", 1) == m1
    assert cp.job_models.jobs() == ["orders"]
    history = cp.job_models.history("orders")
    assert [(h["version"], h["event"], h["active"]) for h in history] == [(1, "planned", False), (1, "activated", True)]
    assert history[0]["reason"] == "first deployment"
    assert history[0]["factor"] == 2 and history[0]["task_count"] == 4
    # another process (a fresh instance) sees the same state
    assert ControlPlane(home).job_models.active("orders") == m1
    assert DeltaTable(str(home.control_table("job_models"))).metadata().partition_columns == ["job"]


def test_planned_but_not_activated_keeps_previous_version_active(cp: ControlPlane, home: Home) -> None:
    cp.job_models.save(model(1), "first deployment")
    cp.job_models.activate("orders", 1)
    cp.job_models.save(model(2, factor=4), "rescale to 4")  # then the process "crashes"
    other = ControlPlane(home)
    assert other.job_models.active_version("orders") == 1
    assert other.job_models.latest_version("orders") == 2
    assert other.job_models.active("orders").elasticity_factor == 1
    other.job_models.activate("orders", 2)
    assert cp.job_models.active("orders").elasticity_factor == 4
    cp.job_models.activate("orders", 1, reason="roll back")  # a rollback is one more activation
    assert other.job_models.active_version("orders") == 1


def test_duplicate_and_backwards_versions_are_refused(cp: ControlPlane) -> None:
    cp.job_models.save(model(1), "first")
    cp.job_models.save(model(2), "second")
    with pytest.raises(ModelError, match=r"already has a model version 2.*plan version 3"):
        cp.job_models.save(model(2, factor=2), "again")
    with pytest.raises(ModelError, match="go back in history"):
        cp.job_models.save(model(0), "older")
    assert cp.job_models.latest_version("orders") == 2
    assert cp.job_models.get("orders", 2).elasticity_factor == 1


def test_concurrent_planners_cannot_both_save_a_version(cp: ControlPlane, home: Home) -> None:
    cp.job_models.save(model(1), "first")
    racer = ControlPlane(home)
    table = racer.job_models.table
    stale = table.load()  # the racer read the table before the other planner committed ...
    cp.job_models.save(model(2), "planner A")
    table.load = lambda: stale  # type: ignore[method-assign]  # ... and commits on that snapshot
    with pytest.raises(ModelError, match="at the same time"):
        racer.job_models.save(model(2, factor=2), "planner B")
    assert ControlPlane(home).job_models.get("orders", 2).elasticity_factor == 1


def test_activation_order_does_not_trust_clocks(cp: ControlPlane, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    cp.job_models.save(model(1), "first")
    cp.job_models.save(model(2, factor=2), "second")
    cp.job_models.activate("orders", 2)
    racer = ControlPlane(home)
    table = racer.job_models.table
    stale = table.load()
    cp.job_models.activate("orders", 1, reason="roll back")
    table.load = lambda: stale  # type: ignore[method-assign]
    with pytest.raises(ModelError, match="activated a model of job 'orders' at the same time"):
        racer.job_models.activate("orders", 2)
    # a machine whose clock is an hour behind activates version 2 again: it is still the latest activation
    slow = SkewedHost(home, wall_offset_s=-3600.0, boot_offset_s=-5000.0)
    with slow.wall():
        slow.control().job_models.activate("orders", 2, reason="slow clock")
    assert ControlPlane(home).job_models.active_version("orders") == 2
    assert [h["reason"] for h in cp.job_models.history("orders") if h["active"]] == ["slow clock"]


def test_activate_refuses_unknown_version_and_unknown_job(cp: ControlPlane) -> None:
    cp.job_models.save(model(1), "first")
    with pytest.raises(ModelError, match=r"job 'orders' has no model version 7; its versions are 1"):
        cp.job_models.activate("orders", 7)
    with pytest.raises(UnknownJobError, match=r"'payments'.*known jobs: orders"):
        cp.job_models.activate("payments", 1)
    with pytest.raises(ModelError, match="none was activated"):
        cp.job_models.active("orders")


def test_unknown_job_error_lists_known_jobs(cp: ControlPlane) -> None:
    with pytest.raises(UnknownJobError, match="no job has a model yet"):
        cp.job_models.active("orders")
    for job in ("orders", "clicks"):
        cp.job_models.save(model(1, job=job), "first")
        cp.job_models.activate(job, 1)
    with pytest.raises(UnknownJobError, match=r"job 'payments' has no job model .*known jobs: clicks, orders"):
        cp.job_models.active("payments")
    with pytest.raises(UnknownJobError, match="known jobs: clicks, orders"):
        cp.job_models.history("payments")


def test_corrupt_model_row_names_job_and_version(cp: ControlPlane, home: Home) -> None:
    cp.job_models.save(model(1), "first")
    cp.job_models.activate("orders", 1)
    row = {
        "job": "orders",
        "version": 2,
        "event": "planned",
        "reason": "hand-edited",
        "factor": 1,
        "grouper": "GroupByPartition",
        "task_count": 2,
        "container_count": 1,
        "model": '{"jobName": "orders", "version": 2, "containers": {',
        "created_at": utc_now(),
    }
    activation = {**row, "event": "activated", "model": None, "activation": 2, "created_at": utc_now()}
    write_deltalake(
        str(home.control_table("job_models")),
        pa.Table.from_pylist([row, activation], schema=JOB_MODELS.schema),
        mode="append",
    )
    with pytest.raises(ModelError, match=r"job 'orders' version 2 is corrupt: job model is not valid JSON"):
        cp.job_models.active("orders")
    with pytest.raises(ModelError, match=r"job 'orders' version 2 is corrupt"):
        cp.job_models.get("orders", 2)
    with pytest.raises(ModelError, match=r"job 'orders' version 2 is corrupt"):
        cp.job_models.activate("orders", 2)
    assert cp.job_models.get("orders", 1) == model(1)


def test_tables_made_by_an_older_version_gain_new_nullable_columns(cp: ControlPlane, home: Home) -> None:
    old_schema = JOB_MODELS.schema.remove(JOB_MODELS.schema.get_field_index("activation"))
    m1 = model(1)
    planned = {
        "job": "orders",
        "version": 1,
        "event": "planned",
        "reason": "written by an older pipelines",
        "factor": 1,
        "grouper": m1.grouper,
        "task_count": m1.task_count,
        "container_count": 1,
        "model": m1.dumps(),
        "created_at": utc_now(),
    }
    write_deltalake(
        str(home.control_table("job_models")), pa.Table.from_pylist([planned], schema=old_schema), partition_by=["job"]
    )
    assert cp.job_models.get("orders", 1) == m1 and cp.job_models.active_version("orders") is None
    cp.job_models.activate("orders", 1)
    assert ControlPlane(home).job_models.active_version("orders") == 1
    assert "activation" in DeltaTable(str(home.control_table("job_models"))).schema().to_arrow().names


def test_latest_checkpoints_take_the_highest_batch_per_bucket(cp: ControlPlane) -> None:
    start = {ssp(p, b): "0" for p in range(2) for b in range(2)}
    cp.checkpoints.write("orders", 2, CheckpointMap(2, start), batch_id=-1)
    cp.checkpoints.write("orders", 2, CheckpointMap(2, {ssp(0, 0): "10", ssp(0, 1): "12"}), batch_id=0)
    cp.checkpoints.write("orders", 2, CheckpointMap(2, {ssp(0, 0): "30"}), batch_id=3)
    cp.checkpoints.write("orders", 2, CheckpointMap(2, {ssp(0, 0): "20", ssp(1, 1): "5"}), batch_id=2)  # late
    cp.checkpoints.write("orders", 2, CheckpointMap(2, {ssp(1, 1): "7"}), batch_id=2)  # replayed batch: later wins
    cp.checkpoints.write("orders", 1, CheckpointMap(1, {ssp(0): "99", ssp(1): "99"}), batch_id=8)  # other version
    latest = cp.checkpoints.latest("orders", 2)
    assert latest.factor == 2
    assert latest.offsets == {ssp(0, 0): "30", ssp(0, 1): "12", ssp(1, 0): "0", ssp(1, 1): "7"}
    assert cp.checkpoints.latest_batch("orders", 2) == 3
    whole = cp.checkpoints.latest("orders", 1)
    assert whole.offsets == {ssp(0): "99", ssp(1): "99"}
    table = DeltaTable(str(cp.home.control_table(CHECKPOINTS.name)))
    stored = table.to_pyarrow_table(filters=[("model_version", "=", 1)])
    assert set(stored.column("key_bucket").to_pylist()) == {-1}


def test_missing_or_incomplete_checkpoints_are_model_errors(cp: ControlPlane) -> None:
    with pytest.raises(ModelError, match="version 3 has no checkpoints"):
        cp.checkpoints.latest("orders", 3)
    assert cp.checkpoints.latest_batch("orders", 3) is None
    cp.checkpoints.write("orders", 3, CheckpointMap(2, {ssp(0, 0): "4"}), batch_id=1)
    with pytest.raises(ModelError, match=r"version 3 are incomplete.*\[deltalog, events, 0, 1\]"):
        cp.checkpoints.latest("orders", 3)
    with pytest.raises(ModelError, match="needs a key bucket"):
        cp.checkpoints.write("orders", 3, CheckpointMap(2, {ssp(0): "4"}), batch_id=1)


def test_scaling_events_keep_their_latest_state(cp: ControlPlane) -> None:
    started = ScalingEvent.start("orders", "rescale", from_version=1, to_version=2, from_factor=1, to_factor=4)
    cp.events.record(started)
    other = ScalingEvent.start("orders", "partition-expansion", details={"from": 2, "to": 4})
    cp.events.record(other)
    cp.events.record(started.finish(EventStatus.VERIFIED, migrated=8))
    events = cp.events.history("orders")
    assert [(e.event_id, e.status) for e in events] == [
        (started.event_id, EventStatus.VERIFIED),
        (other.event_id, EventStatus.STARTED),
    ]
    assert events[0].details == {"migrated": 8}
    assert events[0].finished_at is not None and events[0].finished_at > events[0].started_at
    assert events[1].details == {"from": 2, "to": 4}
    assert cp.events.history("clicks") == []


def test_metrics_are_long_and_filterable(cp: ControlPlane) -> None:
    cp.metrics.append(
        [
            {
                "job": "orders",
                "model_version": 1,
                "batch_id": 0,
                "task": "Partition 0",
                "metric": "records",
                "value": 5,
            },
            {"job": "orders", "model_version": 1, "batch_id": 1, "metric": "lag", "value": 2.5},
            {
                "job": "orders",
                "model_version": 2,
                "batch_id": 2,
                "task": "Partition 0-1-2",
                "metric": "records",
                "value": 7,
            },
            {"job": "clicks", "model_version": 1, "batch_id": 0, "metric": "records", "value": 1},
        ]
    )
    frame = cp.metrics.read("orders")
    assert list(frame["value"]) == [5.0, 2.5, 7.0]
    assert frame["task"].isna().tolist() == [False, True, False]
    assert list(cp.metrics.read("orders", metrics=["records"], model_version=2)["task"]) == ["Partition 0-1-2"]
    assert list(cp.metrics.read("orders", since_batch=1)["batch_id"]) == [1, 2]
    assert cp.metrics.read("payments").empty


def test_a_views_window_starts_at_the_newest_files_of_the_job_read_from_the_logs_statistics(cp: ControlPlane) -> None:
    """``metrics.recent_start``: a busy job's hour is thousands of files, and a view reads only the newest."""
    since = utc_now() - timedelta(hours=1)
    assert cp.metrics.recent_start("a", since, max_files=2) == since, "no table yet: the window as asked"
    for job, b in (("a", 0), ("b", 0), ("a", 1), ("a", 2), ("b", 1)):  # one file per append, "b" between "a"'s
        cp.metrics.append([{"job": job, "model_version": 1, "batch_id": b, "metric": "records", "value": 1}])
    ends = sorted(cp.metrics.table.read("a", columns=["at"]).column("at").to_pylist())
    assert cp.metrics.recent_start("a", since, max_files=3) == since, "three files of a: all in the window"
    start = cp.metrics.recent_start("a", since, max_files=2)  # the log's statistics keep milliseconds
    assert ends[1] - timedelta(milliseconds=1) < start <= ends[1] < ends[2], "the newest two of a's files, not b's"
    late = ends[2] + timedelta(seconds=1)
    assert cp.metrics.recent_start("a", late, max_files=1) == late, "no file that late: the window as asked"
