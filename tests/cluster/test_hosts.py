"""The multi-host infrastructure itself: hosts that share nothing but a private subnet, and leave nothing behind."""

from __future__ import annotations

import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.hosts import HOST_TMP, REPO_ROOT, Cluster, Host, list_netns, remove_leftovers

pytestmark = pytest.mark.slow

NETCHECK = str(REPO_ROOT / "testbed" / "netcheck.py")


def probe(host: Host, *args: str | int) -> str:
    """One line of ``netcheck.py`` run in ``host``."""
    done = host.exec([sys.executable, "-I", NETCHECK, *map(str, args)], timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def wait_for(predicate: object, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.02)


def test_hosts_ping_each_other_by_ip(cluster: Cluster) -> None:
    one, two = cluster["worker1"], cluster["worker2"]
    assert one.ip != two.ip
    assert probe(one, "ping", two.ip) == f"reply from {two.ip}"
    assert probe(two, "ping", one.ip) == f"reply from {one.ip}"
    assert two.exec(["getent", "hosts", "worker1"]).stdout.split() == [one.ip, "worker1"]  # every host by name


def test_each_host_has_its_own_hostname_tmp_shm_and_pids(cluster: Cluster) -> None:
    one, two = cluster["worker1"], cluster["worker2"]
    assert one.exec(["hostname"]).stdout.strip() == "worker1"
    assert two.exec(["hostname"]).stdout.strip() == "worker2"
    token = secrets.token_hex(6)
    mark = HOST_TMP / f"mark-{token}"
    write = f"echo {token} > {mark} && echo {token} > /dev/shm/mark-{token}"
    assert one.exec(["sh", "-c", write]).returncode == 0
    read = f"cat {mark} /dev/shm/mark-{token}"
    assert one.exec(["sh", "-c", read]).stdout.split() == [token, token]  # one host: one /tmp for all its processes
    assert two.exec(["sh", "-c", read]).returncode != 0
    assert not mark.exists() and not Path(f"/dev/shm/mark-{token}").exists()

    seconds = str(100000 + secrets.randbelow(800000))  # a command line no other process has
    sleeper = one.run(["sleep", seconds], log_name="sleeper")
    try:
        wait_for(lambda: len(one.pids()) == 1, what="the sleeper in worker1")
        own_pids = "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
        seen_in_one = eval(one.python(own_pids).stdout)
        seen_in_two = eval(two.python(own_pids).stdout)
        root_pid = one.pids()[0]
        assert root_pid not in seen_in_one  # the host numbers its own processes
        assert 1 in seen_in_one and len(seen_in_one) == 3  # its init, the sleeper and the listing itself
        assert len(seen_in_two) == 2  # its init and the listing: nothing of worker1
        listing = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"
        assert f"sleep {seconds}" in one.exec(["sh", "-c", listing]).stdout
        assert f"sleep {seconds}" not in two.exec(["sh", "-c", listing]).stdout
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_listener_on_a_host_ip_is_reachable_from_another_host_only(cluster: Cluster) -> None:
    server_host, client = cluster["master"], cluster["driver1"]
    token = secrets.token_hex(8)
    server = server_host.run([sys.executable, "-I", NETCHECK, "serve", server_host.ip, 7077, token], log_name="serve")
    try:
        wait_for(lambda: "listening" in server.log_path.read_text(), what="the listener")
        assert probe(client, "connect", server_host.ip, 7077) == f"ok {token}"
        assert probe(client, "connect", "master", 7077) == f"ok {token}"
        assert probe(client, "connect", "127.0.0.1", 7077) == "ECONNREFUSED"  # its own loopback, not master's
        assert token not in _answer_from_the_machine(server_host.ip, 7077)  # the machine is not on the subnet
    finally:
        server.terminate()
        assert server.wait(timeout=10) == -signal.SIGTERM  # the signal reached the server and its exit came back


def test_nothing_is_reachable_beyond_the_subnet(cluster: Cluster) -> None:
    host = cluster["worker1"]
    routes = host.exec(["ip", "-4", "route", "show", "table", "all"]).stdout
    assert "default" not in routes
    assert [r.split()[0] for r in routes.splitlines() if "table local" not in r] == ["10.77.0.0/24"]
    ipv6 = host.exec(["ip", "-o", "-6", "addr"]).stdout.splitlines()
    assert [line.split()[1:4] for line in ipv6] == [["lo", "inet6", "::1/128"]]  # IPv6 on loopback only

    with socket.create_server(("0.0.0.0", 0)) as outside:  # a server of the machine, on every interface
        port = outside.getsockname()[1]
        for address in _machine_addresses():
            assert probe(host, "connect", address, port) == "ENETUNREACH"
        assert probe(host, "connect", "127.0.0.1", port) == "ECONNREFUSED"
        assert probe(host, "connect", "1.1.1.1", 443) == "ENETUNREACH"
        assert probe(host, "ping", "8.8.8.8") == "ENETUNREACH"


def test_kill_all_kills_every_process_of_the_host_and_boot_brings_it_back(cluster: Cluster) -> None:
    host = cluster["driver2"]
    assert host.exec(["sh", "-c", f"echo before > {HOST_TMP / 'before-the-kill'}"]).returncode == 0
    tree = "sleep 300 & sleep 300 & (setsid sh -c 'trap \"\" TERM HUP INT; sleep 300' &); wait"
    shell = host.run(["sh", "-c", tree], log_name="tree")
    stubborn = host.run(
        [sys.executable, "-c", "import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(300)"]
    )
    wait_for(lambda: len(host.pids()) == 6, what="two shells, three sleeps and a Python in driver2")
    pids = host.pids()
    assert any(_parent(p) == host.init_pid for p in pids), "the setsid shell is an orphan, adopted by the init"

    started = time.monotonic()
    host.kill_all()
    took = time.monotonic() - started
    assert host.pids() == [] and not host.alive
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    assert shell.wait(timeout=5) == -signal.SIGKILL and stubborn.wait(timeout=5) == -signal.SIGKILL
    with pytest.raises(RuntimeError, match="down"):
        host.run(["true"])
    assert took < 5

    host.boot()
    assert host.alive and host.pids() == []
    assert host.exec(["ls", "-A", "/tmp"]).stdout == ""  # a fresh /tmp, as after a reboot
    assert probe(cluster["worker1"], "ping", host.ip) == f"reply from {host.ip}"


def test_repository_venv_and_java_are_at_the_same_paths_inside(cluster: Cluster) -> None:
    host = cluster["worker2"]
    done = host.python("import os, pyspark, pipelines; print(os.getcwd(), pyspark.__version__, pipelines.__file__)")
    assert done.returncode == 0, done.stderr
    cwd, version, package = done.stdout.split()
    import pyspark

    assert (cwd, version) == (str(REPO_ROOT), pyspark.__version__)
    assert package.startswith(str(REPO_ROOT))
    java = host.exec(["java", "-version"])
    assert java.returncode == 0 and "version" in java.stderr
    jars = Path(pyspark.__file__).parent / "jars"
    assert host.exec(["test", "-f", str(next(jars.glob("spark-core_*.jar")))]).returncode == 0


def test_teardown_removes_every_namespace_link_and_process_even_after_a_failure(tmp_path: Path) -> None:
    links_before = _root_links()
    hosts = Cluster(["t1", "t2"], tmp_path)
    made: list[str] = []
    pids: list[int] = []
    with pytest.raises(ZeroDivisionError), hosts:
        made = [n for n in list_netns() if n.startswith(hosts.prefix)]
        hosts["t1"].run(["sleep", "300"])
        wait_for(lambda: len(hosts["t1"].pids()) == 1, what="a process in t1")
        pids = [*hosts["t1"].pids(), hosts["t1"].init_pid or 0, hosts["t2"].init_pid or 0]
        1 / 0  # noqa: B018 - the test fails here; teardown must still run
    assert len(made) == 3  # two hosts and the switch
    assert not [n for n in list_netns() if n.startswith(hosts.prefix)]
    assert _root_links() == links_before
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    hosts.close()  # idempotent


def test_a_crashed_runs_leftovers_are_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"ept-{gone.pid}-1-crashed"
    subprocess.run(["ip", "netns", "add", name], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "300"], start_new_session=True)
    try:
        wait_for(
            lambda: (
                str(orphan.pid) in subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
            ),
            what="the orphan in its netns",
        )
        assert name in remove_leftovers()
        assert name not in list_netns()
        assert orphan.wait(timeout=5) == -signal.SIGKILL
    finally:
        orphan.kill()
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def test_without_the_capabilities_the_tests_fail_naming_them() -> None:
    drop = "-net_admin,-sys_admin"
    test = f"{__file__}::test_hosts_ping_each_other_by_ip"
    cmd = ["setpriv", "--bounding-set", drop, "--inh-caps", drop, sys.executable, "-m", "pytest", "-q", test]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "CAP_NET_ADMIN" in out and "CAP_SYS_ADMIN" in out
    assert "1 error" in out and "skipped" not in out


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def _answer_from_the_machine(ip: str, port: int) -> str:
    """What a connection from the root namespace to ``ip:port`` reads: it goes out by the machine's default
    route, if any, where whatever answers is not our host (this machine's gateway accepts any TCP connection)."""
    try:
        with socket.create_connection((ip, port), timeout=1) as sock:
            return sock.recv(100).decode(errors="replace")
    except OSError as e:
        return str(e)


def _machine_addresses() -> list[str]:
    """This machine's own IPv4 addresses, loopback excepted (``ip -o -4 addr`` in the root namespace)."""
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines()]
    return [address for address in found if not address.startswith("127.")]


def test_a_host_inherits_neither_the_test_processs_spark_home_nor_its_loopback_endpoints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SparkSession of the test process sets SPARK_HOME to links in its own /tmp, and the s3_server fixture sets
    AWS_ENDPOINT_URL_S3 to its loopback: inherited, a host's driver found no spark-submit and no store."""
    from testbed.hosts import _host_env

    monkeypatch.setenv("SPARK_HOME", "/tmp/pipelines-spark-home-x")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    monkeypatch.setenv("PIPELINES_SOMETHING", "kept")
    env = _host_env({"AWS_ENDPOINT_URL": "http://10.77.0.20:8333"})
    assert "SPARK_HOME" not in env and "AWS_ENDPOINT_URL_S3" not in env
    assert env["AWS_ENDPOINT_URL"] == "http://10.77.0.20:8333" and env["PIPELINES_SOMETHING"] == "kept"
