"""Hosts for multi-host tests and benchmarks, made of Linux namespaces on this one machine.

A host is a network namespace with one veth interface on a private subnet
(``10.77.0.0/24``), its own hostname, its own pid namespace and its own tmpfs
over ``/tmp`` and ``/dev/shm``; the rest of the file system (the repository,
its venv, Java) is the machine's, at the same paths, as one install path on
every host of a real cluster would be. The veths' other ends sit on a bridge
inside a namespace of its own (the "switch"), which has no address and no
route: a host reaches its own loopback and the other hosts, nothing else (no
route out, no NAT, not even the root namespace). Because the whole network
lives in namespaces, two test sessions running at once do not clash, even on
the same subnet.

Each host has an init (``host_init.py``, pid 1 of its pid namespace), started
with ``ip netns exec NS unshare --uts --pid --fork --mount --mount-proc``
after the host's hostname, ``/etc/hosts`` (every host by name), ``/tmp`` and
``/dev/shm`` are set. ``Host.run`` joins the init's namespaces
(``host_enter.py``), so all processes of a host share one ``/tmp`` and one pid
space, and ``Host.kill_all`` SIGKILLs the init, upon which the kernel kills
every other process of the host at once: a host that dies whole.

Everything made is named ``ept-<pid of the owning process>-...``: ``close``
(a pytest finalizer, and ``atexit`` for an interrupted run) removes it all and
may be called any number of times, and ``Cluster.start`` first removes what a
crashed earlier run left (names whose owning process is gone).
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

PREFIX = "ept-"
"""Every namespace made is ``ept-<owner pid>-<n>-<host>`` (``...-<n>--switch`` for the bridge), n counting the
clusters of the owning process."""
SUBNET = ipaddress.IPv4Network("10.77.0.0/24")
FIRST_HOST = 10
"""Hosts get ``10.77.0.10``, ``.11``, ... in the order they are named."""
BOOT_TIMEOUT_S = 20.0
KILL_TIMEOUT_S = 15.0
REPO_ROOT = Path(__file__).resolve().parents[1]
_HERE = Path(__file__).resolve().parent
_HOST_NAME = re.compile(r"^[a-z][a-z0-9-]{0,14}$")  # a hostname that is also a valid interface name
HOST_TMP = Path("/tmp")
"""Each host's own ``/tmp``: a tmpfs its start script mounts, private to the host (paths under it are per host)."""
_PRIVATE_DIRS = (str(HOST_TMP), "/dev/shm")
_CAPABILITIES = {
    12: ("CAP_NET_ADMIN", "network namespaces, veth pairs and a bridge"),
    21: ("CAP_SYS_ADMIN", "mount, pid and uts namespaces and the tmpfs over /tmp and /dev/shm"),
}
_CLUSTERS = itertools.count(1)  # two clusters of one process get different names
_TOOLS = ("ip", "unshare", "setpriv", "mount", "hostname", "sh")

# Run by `sh -c` as the host's first process, inside its fresh namespaces: the private parts, then the init.
# /etc/hosts is bound before /tmp is covered, since the file it binds lives in the test's temporary folder.
_BOOT_SCRIPT = """set -e
hostname "$1"
mount --bind "$2" /etc/hosts
mount -t tmpfs -o mode=1777 "tmpfs-$1" /tmp
mount -t tmpfs -o mode=1777 "shm-$1" /dev/shm
exec "$3" -I "$4"
"""


class NamespacesUnavailable(RuntimeError):
    """This machine (or this process) cannot make the hosts; the message names what is missing."""


class HostProcess(subprocess.Popen[bytes]):
    """A process started in a host: the ``Popen`` of its ``host_enter.py`` parent, plus where its output goes.

    ``terminate()``/``send_signal()`` reach the command; ``kill()`` kills the parent, and the command with it.
    """

    log_path: Path
    host: str


class Host:
    """One machine of the test cluster: a name (also its hostname), an IP on the subnet, processes."""

    def __init__(self, cluster: Cluster, name: str, ip: str) -> None:
        self.cluster = cluster
        self.name = name
        self.ip = ip
        self.netns = f"{cluster.prefix}{name}"
        self.init_pid: int | None = None
        self._boot: subprocess.Popen[bytes] | None = None
        self._pidns_fd: int | None = None  # held open so the namespace's inode is not reused while we compare
        self._pidns_ino: int | None = None
        self._seq = itertools.count(1)

    def __repr__(self) -> str:
        state = f"init {self.init_pid}" if self.alive else "down"
        return f"Host({self.name!r}, {self.ip}, {state})"

    @property
    def alive(self) -> bool:
        """Whether the host is up (its init runs); False after ``kill_all`` until ``boot``."""
        return self._boot is not None and self._boot.poll() is None

    def boot(self) -> None:
        """Start the host's init: a fresh pid namespace, hostname, empty ``/tmp`` and ``/dev/shm``.

        Called by ``Cluster.start``; call it again after ``kill_all`` to bring a host back as after a reboot
        (same name and IP, nothing left in its ``/tmp``).
        """
        if self.alive:
            raise RuntimeError(f"host {self.name} is already up")
        self._forget_init()
        log = self.cluster.log_dir / f"{self.name}-init.log"
        argv = ["setpriv", "--pdeathsig", "KILL", "ip", "netns", "exec", self.netns]
        argv += ["unshare", "--uts", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"]
        argv += ["sh", "-c", _BOOT_SCRIPT, "boot", self.name, str(self.cluster.hosts_file)]
        argv += [sys.executable, str(_HERE / "host_init.py")]
        with log.open("ab") as err:
            boot = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        self._boot = boot
        assert boot.stdout is not None
        ready, _, _ = select.select([boot.stdout], [], [], BOOT_TIMEOUT_S)
        line = boot.stdout.readline() if ready else b""
        boot.stdout.close()
        if line.strip() != b"ready":
            self.kill_all()
            raise NamespacesUnavailable(
                f"host {self.name} did not boot (`unshare --uts --pid --mount --mount-proc` and tmpfs mounts need"
                f" CAP_SYS_ADMIN): {_tail(log)}"
            )
        self.init_pid = _find_init(boot.pid)
        self._pidns_fd = os.open(f"/proc/{self.init_pid}/ns/pid", os.O_RDONLY)
        self._pidns_ino = os.fstat(self._pidns_fd).st_ino

    def run(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        log_name: str | None = None,
        with_stdin: bool = False,
    ) -> HostProcess:
        """Start a long-lived process in this host; its stdout and stderr go to ``.log_path``.

        ``env`` is added to this process's environment. ``cwd`` defaults to the repository root (the same path
        inside every host). The process runs in the host's pid namespace, so ``kill_all`` kills it and its
        children, wherever they were reparented. ``with_stdin``: its stdin is a pipe (``.stdin``, text) the test
        writes requests to, e.g. to a warm helper that answers in its log; otherwise it reads nothing.
        """
        argv = self._enter_argv(cmd, cwd)
        seq = next(self._seq)
        log_path = self.cluster.log_dir / f"{self.name}-{seq:02d}-{log_name or Path(cmd[0]).name}.log"
        with log_path.open("ab") as out:
            proc = HostProcess(
                argv,
                env=_host_env(env),
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                text=with_stdin,
            )
        proc.log_path = log_path
        proc.host = self.name
        return proc

    def exec(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in this host to its end and capture its output (text)."""
        return subprocess.run(
            self._enter_argv(cmd, cwd),
            env=_host_env(env),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def python(self, code: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """``exec`` of ``python -c code args`` with the venv's Python."""
        return self.exec([sys.executable, "-c", code, *args], **kwargs)

    def pids(self) -> list[int]:
        """Pids (as the root namespace numbers them) of every live process in this host, its init excepted."""
        if self._pidns_ino is None:
            return []
        found = []
        for pid in _all_pids():
            if pid == self.init_pid:
                continue
            try:
                if os.stat(f"/proc/{pid}/ns/pid").st_ino != self._pidns_ino or _is_zombie(pid):
                    continue
            except OSError:  # gone meanwhile
                continue
            found.append(pid)
        return found

    def kill_all(self, timeout: float = KILL_TIMEOUT_S) -> None:
        """SIGKILL the host's init, so the kernel kills every process of the host; return once all are gone.

        The host is down afterwards (``alive`` is False, ``run`` refuses) until ``boot``. Idempotent.
        """
        boot, self._boot = self._boot, None
        if boot is None:
            return
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        else:  # a boot that failed half way: `unshare --kill-child` SIGKILLs an init not found yet
            with contextlib.suppress(ProcessLookupError):
                boot.kill()
        boot.wait(timeout=timeout)  # unshare reaps the init and exits: no zombie left to the machine's init
        deadline = time.monotonic() + timeout
        while (left := self.pids()) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._boot = None
        if left:
            raise RuntimeError(f"host {self.name}: processes {left} outlived its init for {timeout:.0f} s")

    def _forget_init(self) -> None:
        if self._pidns_fd is not None:
            os.close(self._pidns_fd)
        self._pidns_fd = self._pidns_ino = self.init_pid = None

    def _enter_argv(self, cmd: Sequence[str], cwd: str | os.PathLike[str] | None) -> list[str]:
        if not self.alive or self.init_pid is None:
            raise RuntimeError(f"host {self.name} is down")
        if not cmd:
            raise ValueError("empty command")
        where = str(cwd if cwd is not None else REPO_ROOT)
        return [sys.executable, "-I", str(_HERE / "host_enter.py"), str(self.init_pid), where, "--", *map(str, cmd)]


class Cluster:
    """Hosts on one private subnet; ``start`` builds them, ``close`` removes everything it made.

    Use as a context manager or call ``start``/``close``; ``cluster["worker1"]`` is a :class:`Host`.
    """

    def __init__(self, names: Iterable[str], work_dir: Path, subnet: ipaddress.IPv4Network = SUBNET) -> None:
        names = list(names)
        for name in names:
            if not _HOST_NAME.match(name) or name == "switch":
                raise ValueError(f"host name {name!r}: lowercase letters, digits and '-', 15 at most, not 'switch'")
        if len(set(names)) != len(names):
            raise ValueError(f"host names repeat: {names}")
        addresses = list(subnet.hosts())[FIRST_HOST - 1 :]
        if len(names) > len(addresses):
            raise ValueError(f"{len(names)} hosts do not fit in {subnet}")
        self.prefix = f"{PREFIX}{os.getpid()}-{next(_CLUSTERS)}-"
        self.switch = f"{self.prefix}-switch"
        self.subnet = subnet
        self.log_dir = work_dir
        self.hosts_file = work_dir / "etc-hosts"
        self.hosts = {n: Host(self, n, str(a)) for n, a in zip(names, addresses, strict=False)}
        self._made: list[str] = []  # namespaces created, in order
        self._closed = False

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __iter__(self) -> Any:
        return iter(self.hosts.values())

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Check the machine, remove a crashed run's leftovers, build the network and boot every host."""
        require_namespaces()
        remove_leftovers()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", *(f"{h.ip} {h.name}" for h in self.hosts.values())]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        atexit.register(self.close)
        try:
            self._build_network()
            for host in self.hosts.values():
                host.boot()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill every host's processes and delete every namespace (and with them each veth and the bridge)."""
        problems = []
        for host in self.hosts.values():
            try:
                host.kill_all()
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                problems.append(str(e))
            host._forget_init()
        for ns in reversed(self._made):
            _delete_netns(ns)
        self._made.clear()
        atexit.unregister(self.close)
        if problems:
            raise RuntimeError("; ".join(problems))

    def _build_network(self) -> None:
        bits = self.subnet.prefixlen
        self._add_netns(self.switch)
        # addrgenmode none: no IPv6 link-local address anywhere, the subnet's IPv4 addresses are the only ones
        switch = ["link add name br0 type bridge", "link set dev br0 addrgenmode none up"]
        for host in self.hosts.values():
            self._add_netns(host.netns)
            switch.append(f"link add name {host.name} type veth peer name eth0 netns {host.netns}")
            switch.append(f"link set dev {host.name} addrgenmode none master br0 up")
        _ip_batch(self.switch, switch)
        for host in self.hosts.values():
            lines = ["link set dev lo up", "link set dev eth0 addrgenmode none"]
            lines += [f"addr add {host.ip}/{bits} dev eth0", "link set dev eth0 up"]
            _ip_batch(host.netns, lines)

    def _add_netns(self, name: str) -> None:
        done = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
        if done.returncode != 0:
            raise NamespacesUnavailable(
                f"`ip netns add {name}` failed (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN):"
                f" {done.stderr.strip()}"
            )
        self._made.append(name)


def require_namespaces() -> None:
    """Raise :class:`NamespacesUnavailable` naming what this machine lacks to make the hosts."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        raise NamespacesUnavailable(f"commands not found: {', '.join(missing)} (iproute2 and util-linux)")
    effective = _effective_capabilities()
    lacking = [f"{name} ({why})" for bit, (name, why) in _CAPABILITIES.items() if not effective >> bit & 1]
    if lacking:
        raise NamespacesUnavailable(f"this process lacks {'; '.join(lacking)}")
    for path in (REPO_ROOT, Path(sys.prefix), Path(sys.executable).resolve()):
        for private in _PRIVATE_DIRS:
            if path == Path(private) or Path(private) in path.parents:
                raise NamespacesUnavailable(
                    f"{path} is under {private}, which every host replaces with a tmpfs of its own: put the"
                    " repository and its venv elsewhere"
                )


def remove_leftovers() -> list[str]:
    """Delete the namespaces (and kill the processes) of earlier runs whose owning process is gone."""
    removed = []
    for ns in list_netns():
        match = re.match(rf"^{re.escape(PREFIX)}(\d+)-", ns)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _delete_netns(ns)
        removed.append(ns)
    return removed


def list_netns() -> list[str]:
    """Names of the machine's named network namespaces (``ip netns list``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _delete_netns(name: str) -> None:
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)  # absent already: fine


def _ip_batch(netns: str, commands: list[str]) -> None:
    done = subprocess.run(
        ["ip", "-n", netns, "-batch", "-"], input=("\n".join(commands) + "\n").encode(), capture_output=True
    )
    if done.returncode != 0:
        raise NamespacesUnavailable(
            f"`ip -n {netns}` could not build the test network (CAP_NET_ADMIN, veth and bridge support):"
            f" {done.stderr.decode(errors='replace').strip()}"
        )


def _find_init(ancestor: int) -> int:
    """The descendant of ``ancestor`` that is pid 1 of its own pid namespace (``unshare --fork`` made it)."""
    children: dict[int, list[int]] = {}
    ns_pids: dict[int, list[str]] = {}
    for pid in _all_pids():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        children.setdefault(int(fields.get("PPid", "0")), []).append(pid)
        ns_pids[pid] = fields.get("NSpid", "").split()
    queue = [ancestor]
    while queue:
        pid = queue.pop(0)
        if pid != ancestor and ns_pids.get(pid, [])[-1:] == ["1"]:
            return pid
        queue.extend(children.get(pid, []))
    raise NamespacesUnavailable(f"no pid-namespace init under process {ancestor}")


def _effective_capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _is_zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] in "ZX"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(no output)"
    except OSError as e:
        return f"(no log: {e})"


HOST_SPECIFIC = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "SPARK_PUBLIC_DNS", "SPARK_HOME", "TMPDIR")
"""Variables naming the test process's own address or its own ``/tmp``: meaningless on another host. Inherited,
they made a driver in a host advertise ``localhost`` to executors on others (the e2e tests' Airflow environment
sets ``SPARK_LOCAL_IP=127.0.0.1`` for the whole pytest process); a ``SPARK_HOME`` (``build_session`` sets it) is
each host's to find, as a user's host finds its own; and the test run's ``TMPDIR`` is a folder of the test
process's ``/tmp``, which a host's own ``/tmp`` does not hold."""
HOST_SPECIFIC_PREFIXES = ("AWS_ENDPOINT_URL",)
"""The S3 and Kinesis servers the test process reaches on its loopback (``AWS_ENDPOINT_URL_S3`` while the
``s3_server`` fixture is up): a host reaching them there reaches nothing; its store comes in ``env``."""


def _host_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment without its host-specific variables, plus ``env``."""
    inherited = {
        k: v for k, v in os.environ.items() if k not in HOST_SPECIFIC and not k.startswith(HOST_SPECIFIC_PREFIXES)
    }
    return {**inherited, **(env or {})}
