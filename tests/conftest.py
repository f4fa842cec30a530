"""Shared test setup: markers by folder, the fast tier, and its guard.

``pytest -m unit`` runs the pure logic; ``scripts/test.sh -m "not slow"`` the fast tier a developer runs
while working: every test that starts Spark, Airflow, a broker, an emulator, an S3 store, a browser or
test hosts is ``slow``, by its folder (e2e, faults, cluster), by a fixture that starts one, or by its own
mark. A test outside ``slow`` that starts one of those programs anyway fails, naming it, so the tier
stays fast by construction rather than by care.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# One definition for the whole tree (the DAG tests use them too): the same fixture imported by two conftests is two
# fixtures, and two ``spark`` fixtures in one worker would share one SparkContext (``getOrCreate``), its s3a set for
# whichever of two S3 servers came first: NoSuchBucket for every bucket made on the other.
from tests.integration.s3_fixtures import s3_server  # noqa: F401
from tests.integration.spark_fixtures import spark  # noqa: F401

# Property tests explore new random cases on a developer's machine (and keep what failed in .hypothesis/); CI runs
# the same cases every time, so a run's verdict depends on the code, not on the draw (CI machines set CI=true).
# Neither has a deadline or a too-slow check: on a loaded two-core machine running the suite on two workers a single
# example can take seconds, and a property's verdict must not depend on the machine's load.
_STEADY = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, **_STEADY)
settings.register_profile("dev", **_STEADY)
settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev")

_MARK_BY_FOLDER = {
    "unit": pytest.mark.unit,
    "integration": pytest.mark.integration,
    "e2e": pytest.mark.e2e,
    "faults": pytest.mark.faults,
    "cluster": pytest.mark.cluster,
}
SLOW_FOLDERS = {"e2e", "faults", "cluster"}
SLOW_FIXTURES = {
    "spark",
    "kafka_broker",
    "s3_server",
    "endpoint",  # the Kinesis emulator of the Kinesis modules
    "airflow_db",
    "running_airflow",
    "browser",
    "cluster_session",
    "spark_cluster",
}
"""Fixtures that start a server, a JVM or a browser: a test that uses one is slow."""
HEAVY_PROGRAMS = {"java", "spark-submit", "spark-class", "airflow", "node", "weed", "chromium"}
SPARK_COMMANDS = {"run", "rescale", "demo", "sql"}


SHARED_BY_GROUP = {
    "running_airflow": "airflow",  # one Airflow (scheduler, triggerer, API server) and one browser
    "browser": "airflow",
    "airflow_db": "airflow-dags",  # one migrated Airflow database for the DAG tests
    "kafka_broker": "kafka",
    "cluster_session": "cluster",  # one set of hosts
}
"""Session servers worth one start: the tests that use one run on one worker of ``pytest -n`` (scripts/test.sh).
The first match wins (an Airflow is built on a database)."""
GROUPED_FOLDERS = {"cluster": "cluster"}
"""Folders whose tests share one worker whatever they use: one set of test hosts (namespaces, a bridge, their
processes) is built per worker, and building it is the cluster tests' largest cost."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the ``xdist_group`` marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        try:
            folder = Path(item.fspath).relative_to(root).parts[0]
        except ValueError:
            continue
        mark = _MARK_BY_FOLDER.get(folder)
        if mark is not None:
            item.add_marker(mark)
        fixtures = set(getattr(item, "fixturenames", ()))
        if folder in SLOW_FOLDERS or SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        group = _group(folder, fixtures, item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _group(folder: str, fixtures: set[str], item: pytest.Item) -> str | None:
    """Which worker-sharing group a test belongs to, if any: everything that would otherwise start a server twice.

    Under ``--dist loadgroup`` a group's tests run on one worker in collection order; every other test goes to
    whichever worker is free. A module-scoped Kinesis emulator (``endpoint``) is grouped by its module.
    """
    if folder in GROUPED_FOLDERS:
        return GROUPED_FOLDERS[folder]
    for fixture, group in SHARED_BY_GROUP.items():
        if fixture in fixtures:
            return group
    if "endpoint" in fixtures:
        return "kinesis-" + Path(item.fspath).stem
    return None


RELEASED_AFTER_LAST_USE = (
    "running_airflow",
    "airflow_db",
    "browser",
    "kafka_broker",
    "s3_server",
    "spark_cluster",
    "cluster_session",
)
"""Session-wide servers stopped right after the last test of the run that uses them, not at the session's end: an
idle Airflow (scheduler, dag-processor, triggerer, API server) kept a load of 2.4-2.9 on two cores while the
integration tests ran beside it for 25 minutes, and a broker, a store or a cluster idles the same way."""
_LAST_USE: dict[str, int] = {}
_POSITION: dict[str, int] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where each released server is last needed, in the order the run will go (after deselection)."""
    _LAST_USE.clear()
    _POSITION.clear()
    for index, item in enumerate(session.items):
        _POSITION[item.nodeid] = index
        for name in set(getattr(item, "fixturenames", ())) & set(RELEASED_AFTER_LAST_USE):
            _LAST_USE[name] = index


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    index = _POSITION.get(item.nodeid)
    info = getattr(item, "_fixtureinfo", None)
    if index is None or info is None:
        return result
    for name in RELEASED_AFTER_LAST_USE:  # dependents first: finishing a fixture finishes what was built on it
        if _LAST_USE.get(name) != index:
            continue
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope == "session":
                fixturedef.finish(item._request)  # type: ignore[attr-defined]
    return result


def _heavy(argv: Any) -> str | None:
    """What a command line starts that the fast tier must not: a JVM, a server, a browser, a Spark run."""
    args = [str(a) for a in ([argv] if isinstance(argv, str | os.PathLike) else list(argv))]
    if not args:
        return None
    program = os.path.basename(args[0].split()[0])
    if program in HEAVY_PROGRAMS and args[1:] != ["-version"]:  # asking a JVM its version starts nothing
        return program
    if "pipelines" in args and "-m" in args and SPARK_COMMANDS & set(args) and "--dry-run" not in args:
        return "a Spark driver (pipelines " + next(a for a in args if a in SPARK_COMMANDS) + ")"
    return None


@pytest.fixture(autouse=True)
def _fast_tier_starts_nothing_heavy(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    original = subprocess.Popen.__init__

    def guarded(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        heavy = _heavy(args)
        if heavy is not None:
            raise AssertionError(f"this test starts {heavy}: mark it @pytest.mark.slow (the fast tier starts none)")
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]


@pytest.hookimpl(trylast=True)  # after pytest's own: its temporary-folder factory exists
def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends a run the way Ctrl-C does, in the controller and in each worker: every fixture's teardown runs.

    A CI job's time limit, ``timeout`` or a stopped service sends SIGTERM, whose default action ended the
    processes on the spot: the servers the session fixtures started (an S3 store, Airflow, a broker) were left
    running. They are also tied to their worker (``lifetime.tied_command``), which covers a worker killed outright.
    """
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    if not hasattr(config, "workerinput"):  # the controller, once per run
        _give_the_run_a_temporary_folder(config)
    if getattr(config.option, "loadgroup", False):  # a worker of ``pytest -n --dist loadgroup``
        config.pluginmanager.register(_GroupSuffix(), "pipelines-xdist-group-suffix")


class _GroupSuffix:
    """Give each test of an ``xdist_group`` the ``@group`` suffix by which ``--dist loadgroup`` keeps a group on one
    worker, where pytest-xdist's own could not.

    pytest-xdist 3.8 writes the suffix to ``item._nodeid``; pytest 9.2 keeps a node's id in ``item._id`` and
    ignores that attribute, so no test was grouped: each worker started its own Airflow, broker and cluster of
    hosts (two Airflows seen side by side on two cores).
    Runs after pytest-xdist's hook and only where its suffix is missing, so a pytest-xdist that sets it right
    gets no second one. ``tests/integration/test_xdist_groups.py`` runs a grouped session and checks the suffix.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            names = sorted(
                {
                    str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")
                }
            )
            if names and not item.nodeid.endswith("@" + "_".join(names)):
                _set_nodeid(item, f"{item.nodeid}@{'_'.join(names)}")


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    if hasattr(item, "_id"):  # pytest >= 9.2: a structured NodeId whose string form is kept as parsed
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid  # type: ignore[attr-defined]


_SCRATCH = pytest.StashKey[str]()


def _give_the_run_a_temporary_folder(config: pytest.Config) -> None:
    """Point ``TMPDIR`` at a folder of this run's, removed when the run ends, for every process the tests start.

    The drivers the fault tests kill, the stores and brokers, Airflow and the browser leave their scratch behind
    (a killed JVM cannot remove its ``spark-*``, ``blockmgr-*`` and ``artifacts-*`` folders): about thirty entries
    in /tmp per run. The Spark drivers follow ``TMPDIR`` through ``session.driver_java_options``.
    pytest's own folders (``tmp_path``, the last three runs kept for a look after a failure) stay where pytest puts
    them: their root is fixed before ``TMPDIR`` changes (pytest-xdist hands it to its workers the same way).
    """
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        factory.getbasetemp()
    scratch = tempfile.mkdtemp(prefix="pipelines-tests-")
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = None  # Python reads TMPDIR again at its next question
    config.stash[_SCRATCH] = scratch


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Silence py4j once the run is over: its connections close from ``__del__`` at interpreter exit and log at INFO
    through a handler whose stream pytest has closed ("--- Logging error ---" after the summary). Every driver of
    this process (the shared session, a test's own) is stopped by then."""
    import logging

    for name in [n for n in logging.root.manager.loggerDict if n == "py4j" or n.startswith("py4j.")]:
        logging.getLogger(name).disabled = True
    _CPU.leave()
    if _SCRATCH in config.stash:  # every worker and server of the run has ended by now
        shutil.rmtree(config.stash[_SCRATCH], ignore_errors=True)


_CPU_BEFORE = pytest.StashKey[float]()


class _CpuAccount:
    """CPU seconds this worker and every process it started (and they started) have used so far.

    The difference over a test phase is what the phase cost: the test's own work, the Spark drivers and CLIs it
    ran, its session JVM and that JVM's Python workers, the servers its fixtures started. Read from the kernel's
    account: with Linux's cgroup-v1 ``cpuacct`` controller writable (root), the worker moves itself into a group
    of its own, which every process it starts inherits, orphans included (a detached driver, a JVM's Python
    workers left to init), and the group's usage is read; the group is removed at the end. Without it no CPU is
    recorded: summing a process tree instead lost the processes that outlive their parent and counted some twice.
    """

    CPUACCT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self) -> None:
        self.group: Path | None = None
        self.tried = False  # a group that could not be made is not tried again at every phase

    def start(self) -> None:
        if self.tried or not (self.CPUACCT / "cpuacct.usage").is_file():
            return
        self.tried = True
        try:
            here = next(
                line.split(":", 2)[2].strip()
                for line in Path("/proc/self/cgroup").read_text().splitlines()
                if "cpuacct" in line.split(":")[1].split(",")
            )
            group = self.CPUACCT / here.lstrip("/") / f"pipelines-tests-{os.getpid()}"
            for old in group.parent.glob("pipelines-tests-*"):  # an earlier run's, emptied since (busy ones stay)
                with contextlib.suppress(OSError):
                    old.rmdir()
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except (OSError, StopIteration):
            return
        self.group = group
        import atexit

        atexit.register(self.leave)  # if the session's end was too early: a server of the worker still ran

    def leave(self) -> None:
        """Back to the group the worker came from, and this one removed (at the session's end)."""
        if self.group is None:
            return
        import time

        with contextlib.suppress(OSError):
            (self.group.parent / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(10):  # a stopped JVM's Python workers end a moment after it
            try:
                self.group.rmdir()
            except OSError:
                time.sleep(0.1)
                continue
            self.group = None
            return
        # Still in use: pyspark's gateway JVM lives until this process exits. A shell outside the group removes it
        # once it is empty (a minute at most; the next timed run's workers remove any group left empty).
        script = 'for _ in $(seq 600); do rmdir "$0" 2>/dev/null && exit 0; sleep 0.1; done'
        with contextlib.suppress(OSError):
            subprocess.Popen(["sh", "-c", script, str(self.group)], start_new_session=True)
        self.group = None

    def total(self) -> float | None:
        """CPU seconds so far, or None where the kernel keeps no account for the worker (no CPU is recorded)."""
        self.start()
        if self.group is None:
            return None
        return int((self.group / "cpuacct.usage").read_text()) / 1e9


_CPU = _CpuAccount()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if os.environ.get("PIPELINES_TEST_TIMELINE"):  # the setup phase's CPU is counted from here
        with contextlib.suppress(Exception):  # a measurement must never fail the run it measures
            if (now := _CPU.total()) is not None:
                item.stash[_CPU_BEFORE] = now
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """With ``PIPELINES_TEST_TIMELINE``, each phase's report carries the CPU seconds it cost (``_CpuAccount``)."""
    report = yield
    if os.environ.get("PIPELINES_TEST_TIMELINE"):
        try:
            now = _CPU.total()
        except Exception:  # a measurement must never fail the run it measures
            return report
        if now is None:
            return report
        before = item.stash.get(_CPU_BEFORE, None)
        if before is not None:
            report.user_properties.append(("cpu", round(now - before, 3)))
        item.stash[_CPU_BEFORE] = now
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``PIPELINES_TEST_TIMELINE=FILE``, one JSON line per test phase: which worker ran it, from when to when,
    and the CPU seconds it cost (``cpu``, ``_CpuAccount``).

    The suite's wall time is the busiest worker's; this shows where a worker waited for the other (a group of
    shared-server tests at the end of a run) and what ran beside what. Written by the controller only (under
    ``pytest -n`` each report names its worker), read by ``scripts/timeline.py``.
    """
    path = os.environ.get("PIPELINES_TEST_TIMELINE")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import json

    node = getattr(report, "node", None)
    worker = node.gateway.id if node is not None else "main"
    line = {"test": report.nodeid, "when": report.when, "worker": worker, "start": report.start, "stop": report.stop}
    line.update((k, v) for k, v in report.user_properties if k == "cpu")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
