"""The launcher never starts a second driver of a job beside a live one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from pipelines.control import ControlPlane
from pipelines.control.drivers import Registration
from pipelines.control.locks import ScalingLock
from pipelines.errors import ConfigError, PipelinesError
from pipelines.runtime import launcher, requests
from pipelines.storage.home import Home

from .jobs import job, produce

REPO = Path(__file__).resolve().parents[3]


def test_a_second_run_is_refused_while_the_first_driver_lives(home: Home) -> None:
    produce(home, "events", 10, keys=2)
    config = job(home, "once", 1)
    # a live process in the pid file stands for the detached driver (what `run --detach` leaves there)
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        launcher.pid_file(home, config.name).parent.mkdir(parents=True, exist_ok=True)
        launcher.pid_file(home, config.name).write_text(f"{socket.gethostname()} {first.pid}\n")
        for detach in (True, False):
            with pytest.raises(PipelinesError, match=f"already has a live driver in this home \\(pid {first.pid}\\)"):
                launcher.run(home, config.name, available_now=True, master="local[1]", detach=detach)
        assert first.poll() is None, "the first driver is left running"
    finally:
        first.kill()
        first.wait()
    assert launcher.running_pid(home, config.name) is None


def test_a_pid_of_another_host_or_of_no_host_is_never_judged_or_signalled(home: Home) -> None:
    """A pid file on a home shared by hosts (NFS) may name another host's process: its number means nothing here."""
    produce(home, "events", 10, keys=2)
    config = job(home, "shared", 1)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        launcher.pid_file(home, config.name).parent.mkdir(parents=True, exist_ok=True)
        for content in (f"another-host {bystander.pid}\n", f"{bystander.pid}\n"):  # another host's; an old file's
            launcher.pid_file(home, config.name).write_text(content)
            assert launcher.running_pid(home, config.name) is None
            launcher.kill(home, config.name)
            assert (
                launcher.stop(home, config.name, timeout=5) is launcher.StopOutcome.NONE_RUNNING
            )  # nothing of this host's
            assert bystander.poll() is None, "a pid this host did not start was not signalled"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_pid_file_naming_a_live_process_of_another_start_time_is_neither_alive_nor_killed(home: Home) -> None:
    """Pids are reused: the process holding the dead driver's pid now (its start time differs) is not the driver."""
    produce(home, "events", 10, keys=2)
    config = job(home, "reused", 1)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    path = launcher.pid_file(home, config.name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        started = psutil.Process(bystander.pid).create_time()
        path.write_text(f"{socket.gethostname()} {bystander.pid} {started - 3600:.3f}\n")  # the driver's, an hour ago
        assert launcher.running_pid(home, config.name) is None
        assert not path.exists(), "a pid file naming another process names nothing: it goes"
        path.write_text(f"{socket.gethostname()} {bystander.pid} {started - 3600:.3f}\n")
        launcher.kill(home, config.name)
        assert launcher.stop(home, config.name, timeout=5) is launcher.StopOutcome.NONE_RUNNING
        assert bystander.poll() is None, "the process that took the pid was not signalled"

        path.write_text(f"{socket.gethostname()} {bystander.pid} {started:.3f}\n")  # its own start: it is the driver
        assert launcher.running_pid(home, config.name) == bystander.pid
        launcher.kill(home, config.name)
        assert bystander.wait(timeout=10) == -9, "the driver the file names is killed"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_detached_drivers_pid_file_keeps_its_start_time(tmp_path: Path) -> None:
    """What ``_spawn`` writes is what ``_pid`` judges: host, pid and the process's own start time."""
    home = Home(tmp_path / "home")
    proc, _ = launcher._spawn(home, "any", [sys.executable, "-c", "import time; time.sleep(60)"], "local[1]")
    try:
        host, pid, started = launcher.pid_file(home, "any").read_text().split()
        assert (host, int(pid)) == (socket.gethostname(), proc.pid)
        assert abs(float(started) - psutil.Process(proc.pid).create_time()) < 0.01
        assert launcher.running_pid(home, "any") == proc.pid
    finally:
        proc.kill()
        proc.wait()


def _driver_on(home: Home, job: str, host: str, pid: int) -> Registration:
    """A driver registered as another host's would be: its rows name that host and its pid there."""
    registration = Registration(home, job)
    registration.identity.update(host=host, pid=pid)
    registration.start()
    registration.beat(1, 3)
    return registration


def test_a_driver_on_another_host_is_refused_a_twin_and_stopped_through_the_control_plane(home: Home) -> None:
    produce(home, "events", 10, keys=2)
    config = job(home, "remote", 1)
    # pid 3 on its host; here pid 3 may be anything (a kernel thread): it must not be looked at
    remote = _driver_on(home, config.name, "driver-host-b", 3)
    with pytest.raises(PipelinesError, match="live driver in this home, pid 3 on host driver-host-b"):
        launcher.run(home, config.name, available_now=True, master="local[1]", detach=True)

    stopped_after: list[float] = []

    def the_remote_driver() -> None:  # polls its stop request between batches, stops, says so
        end = time.monotonic() + 30
        while not requests.stop_asked(home, config.name) and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(1.0)  # the batch in flight
        remote.end(model_version=1, batch_id=4)
        stopped_after.append(time.monotonic())

    thread = threading.Thread(target=the_remote_driver)
    thread.start()
    try:
        assert launcher.stop(home, config.name, timeout=30) is launcher.StopOutcome.STOPPED
        returned = time.monotonic()
    finally:
        thread.join(30)
    assert stopped_after and returned >= stopped_after[0], "stop returned only once the registration said stopped"
    (driver,) = ControlPlane(home).drivers.latest(config.name)
    assert (driver.host, driver.state) == ("driver-host-b", "stopped")


def test_stop_gives_up_on_a_remote_driver_that_does_not_stop_and_never_signals_it(home: Home) -> None:
    produce(home, "events", 10, keys=2)
    config = job(home, "stubborn", 1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        stubborn = _driver_on(home, config.name, "driver-host-c", sleeper.pid)  # the same number, another host
        beating = threading.Event()

        def beat() -> None:
            while not beating.wait(0.5):
                stubborn.beat(1, 3)

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            assert launcher.stop(home, config.name, timeout=3) is launcher.StopOutcome.REQUESTED
        finally:
            beating.set()
            thread.join(5)
        assert sleeper.poll() is None, "a pid named by another host's driver was not signalled"
    finally:
        sleeper.kill()
        sleeper.wait()


PARENT = """
import subprocess, sys, time
from pipelines.runtime.lifetime import tied_command
child = subprocess.Popen(tied_command(["/bin/sleep", "120"]))
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_tied_child_dies_with_its_killed_parent_an_untied_one_lives_on() -> None:
    import psutil

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for tied in (True, False):
        code = PARENT if tied else PARENT.replace("tied_command(", "(")
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        child = psutil.Process(int(parent.stdout.readline()))  # type: ignore[union-attr]
        try:
            end = time.monotonic() + 10
            while child.cmdline() != ["/bin/sleep", "120"] and time.monotonic() < end:
                time.sleep(0.05)  # the shim sets the signal, then exec's the command in its own process
            assert child.cmdline() == ["/bin/sleep", "120"]
            parent.kill()
            parent.wait()
            try:
                child.wait(timeout=5)
                died = True
            except psutil.TimeoutExpired:
                died = False
            assert died is tied
        finally:
            if child.is_running():
                child.kill()


@pytest.mark.slow
def test_an_unreachable_spark_master_is_one_line_and_quick_and_starts_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    produce(home, "events", 10, keys=2)
    config = job(home, "mastered", 1)
    lock_before = ScalingLock(home).state(config.name)
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    message = (
        "error: Spark master spark://127.0.0.1:1 is not reachable (127.0.0.1:1 connection refused); nothing was "
        "started. Start the master, or give another one (--master, or $PIPELINES_SPARK_MASTER for operations), "
        "e.g. local[*] on this machine\n"
    )
    for args, extra in (
        (["run", config.name, "--available-now", "--master", "spark://127.0.0.1:1"], {}),
        (["rescale", config.name, "--factor", "2", "--master", "spark://127.0.0.1:1"], {}),
        (["rescale", config.name, "--factor", "2"], {"PIPELINES_SPARK_MASTER": "spark://127.0.0.1:1"}),
    ):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pipelines", "--home", str(home.root), *args],
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stderr) == (2, message), args
        assert time.monotonic() - started < 20, "refused at once, not after Spark's registration retries"
    assert not (home.root.local_path() / "run").exists()
    assert not (home.spark_checkpoints / config.name).local_path().exists()
    assert ScalingLock(home).state(config.name) == lock_before, "the rescale was refused before it took the lock"
    assert ControlPlane(home).job_models.latest_version(config.name) == 1


@pytest.mark.slow
def test_a_detached_run_whose_master_fails_at_once_is_one_error_line_and_leaves_no_driver(tmp_path: Path) -> None:
    """``yarn`` without ``HADOOP_CONF_DIR`` passes ``check_master`` (a cluster's answer is Spark's to judge) and
    spark-submit refuses it a second later: the cheapest master that reaches a real driver's start and fails it."""
    home = Home(tmp_path / "home")
    produce(home, "events", 10, keys=2)
    config = job(home, "yarned", 1)
    hadoop = ("PIPELINES_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR")
    env = {k: v for k, v in os.environ.items() if k not in hadoop} | {"PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-m", "pipelines", "--home", str(home.root)]
    done = subprocess.run(
        [*cli, "run", config.name, "--detach", "--master", "yarn"],
        env=env,
        capture_output=True,
        text=True,
        timeout=launcher.START_WAIT_S + 60,
    )
    log = launcher.driver_log(home, config.name)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert f"job {config.name} driver exited with code 1 while starting: " in done.stderr
    assert "HADOOP_CONF_DIR or YARN_CONF_DIR must be set" in done.stderr and f"(its log: {log})" in done.stderr
    assert not launcher.pid_file(home, config.name).exists(), "no pid file names the dead driver"
    assert launcher.running_pid(home, config.name) is None
    assert launcher.stop(home, config.name, timeout=5) is launcher.StopOutcome.NONE_RUNNING


def test_a_stop_request_never_outlives_the_drivers_it_was_for(home: Home) -> None:
    """A request left behind would stop the job's next driver after its first batch (one Airflow submits directly)."""
    produce(home, "events", 10, keys=2)
    config = job(home, "stale", 1)
    assert launcher.stop(home, config.name, timeout=5) is launcher.StopOutcome.NONE_RUNNING
    assert not requests.stop_asked(home, config.name), "a stop with no driver left its request for the next one"

    def detached(seconds: float) -> subprocess.Popen[bytes]:  # what `run --detach` leaves: a pid file of this host
        proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)
        launcher.pid_file(home, config.name).parent.mkdir(parents=True, exist_ok=True)
        launcher.pid_file(home, config.name).write_text(f"{socket.gethostname()} {proc.pid}\n")
        return proc

    killed = detached(60)
    try:
        assert launcher.stop(home, config.name, wait=False) is launcher.StopOutcome.REQUESTED
        assert requests.stop_asked(home, config.name), "the live driver's request is there for it to read"
        launcher.kill(home, config.name)
        assert killed.wait(10) == -9
    finally:
        killed.kill()
        killed.wait()
    assert not requests.stop_asked(home, config.name), "a kill left the killed driver's request behind"

    dying = detached(1.0)  # ends before it reads the request, as a crash would
    try:
        assert launcher.stop(home, config.name, timeout=20) is launcher.StopOutcome.STOPPED
    finally:
        dying.kill()
        dying.wait()
    assert not requests.stop_asked(home, config.name), "a driver that died first left its request behind"


def _faked_job(home: Home, monkeypatch: pytest.MonkeyPatch, name: str, code: str) -> str:
    """A job whose driver's command is a Python snippet (no JVM): the launcher's wait is what is tested."""
    produce(home, "events", 10, keys=2)
    config = job(home, name, 1)
    _fake_driver(monkeypatch, code)
    return config.name


def _fake_driver(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    monkeypatch.setattr(
        launcher, "driver_command", lambda home, job, **_: [sys.executable, "-c", code, str(home.root), job]
    )


REGISTERS = """
import sys, time
from pipelines.control.drivers import Registration
from pipelines.storage.home import Home
time.sleep(1.0)  # a session starting
Registration(Home(sys.argv[1]), sys.argv[2]).start()
time.sleep(60)
"""


def test_a_detached_start_returns_once_the_driver_registered_and_leaves_its_pid_file(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _faked_job(home, monkeypatch, "registers", REGISTERS)
    started = time.monotonic()
    detached = launcher.start(home, name, available_now=False, master="local[1]")
    try:
        assert detached.state is launcher.Started.RUNNING
        assert time.monotonic() - started < 30, "returned at the registration, not at the cap"
        assert launcher.running_pid(home, name) == detached.pid
        (driver,) = ControlPlane(home).drivers.live(name)
        assert driver.on_this_host
    finally:
        launcher.kill(home, name)


def test_a_detached_driver_still_starting_at_the_cap_is_left_starting(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _faked_job(home, monkeypatch, "slow", "import time; time.sleep(60)")
    detached = launcher.start(home, name, available_now=False, master="local[1]", wait_s=1.0)
    try:
        assert detached.state is launcher.Started.STARTING
        assert launcher.running_pid(home, name) == detached.pid, "not killed: a slow start is no failure"
    finally:
        launcher.kill(home, name)


def test_a_detached_driver_that_exits_while_starting_is_its_error_and_leaves_no_pid_file(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm = (
        "print('26/11/29 06:41:36 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address')\n"
        "print('Exception in thread \"main\" org.apache.spark.SparkException: no such master')\n"
        "print('\\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)')\n"
        "raise SystemExit(1)\n"
    )
    name = _faked_job(home, monkeypatch, "dies", jvm)
    log = launcher.driver_log(home, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text('Exception in thread "main" java.lang.RuntimeException: an earlier run\'s failure\n')
    with pytest.raises(PipelinesError) as refused:
        launcher.start(home, name, available_now=False, master="local[1]")
    assert str(refused.value) == (
        f'job {name} driver exited with code 1 while starting: Exception in thread "main" '
        f"org.apache.spark.SparkException: no such master (its log: {log})"
    )
    assert not launcher.pid_file(home, name).exists(), "no pid file names a dead driver"

    _fake_driver(monkeypatch, "raise SystemExit(3)")  # says nothing: the earlier runs' lines are not its reason
    with pytest.raises(PipelinesError) as refused:
        launcher.start(home, name, available_now=False, master="local[1]")
    assert str(refused.value) == f"job {name} driver exited with code 3 while starting (its log: {log})"

    noted = (
        "import sys\n"
        "from pipelines.storage.home import Home\n"
        "from pipelines.runtime import requests\n"
        "requests.note_failure(Home(sys.argv[1]), sys.argv[2], 'ConfigError', 'sink table: bad schema')\n"
        "print('error: sink table: bad schema')\n"
        "raise SystemExit(2)\n"
    )
    _fake_driver(monkeypatch, noted)
    said = r"^job dies driver exited with code 2 while starting: sink table: bad schema"
    with pytest.raises(ConfigError, match=said):
        launcher.start(home, name, available_now=False, master="local[1]")
    assert not launcher.pid_file(home, name).exists()
    assert launcher.stop(home, name, timeout=5) is launcher.StopOutcome.NONE_RUNNING


STOPS_AT_A_BOUNDARY = """
import os, pathlib, sys, time
from pipelines.storage.home import Home
from pipelines.runtime import requests
home, job, said = Home(sys.argv[1]), sys.argv[2], pathlib.Path(os.environ["FAKE_DRIVER_SAYS"])
said.write_text("running")
while not requests.stop_asked(home, job):  # what a driver reads between micro-batches
    time.sleep(0.05)
said.write_text("stopped at a batch boundary")
"""

WITH_A_FAKE_DRIVER = """
import sys
from pipelines.runtime import launcher
fake = sys.argv.pop(1)
launcher.driver_command = lambda home, job, **_: [sys.executable, "-c", fake, str(home.root), job]
from pipelines.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_sigterm_stops_a_foreground_run_at_a_batch_boundary_as_ctrl_c_does(home: Home, tmp_path: Path) -> None:
    """A supervisor's stop (systemd, Kubernetes, Airflow's task kill) is SIGTERM, then SIGKILL after its grace: the
    driver was killed at once, as a crash would, where Ctrl-C let it end its batch."""
    produce(home, "events", 10, keys=2)
    config = job(home, "supervised", 1)
    said = tmp_path / "driver-says"
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env |= {"PYTHONPATH": str(REPO), "FAKE_DRIVER_SAYS": str(said)}
    argv = [sys.executable, "-c", WITH_A_FAKE_DRIVER, STOPS_AT_A_BOUNDARY, "--home", str(home.root), "run"]
    cli = subprocess.Popen([*argv, config.name], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not said.exists():
            assert cli.poll() is None and time.monotonic() < deadline, cli.communicate()
            time.sleep(0.05)
        cli.terminate()
        _, err = cli.communicate(timeout=launcher.INTERRUPT_GRACE_S)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 143, err
    assert f"terminated: stopping job {config.name} at its next batch boundary" in err
    assert err.splitlines()[-1] == "terminated", err
    assert said.read_text() == "stopped at a batch boundary"
    assert not requests.stop_asked(home, config.name), "the request went with the driver it was for"
