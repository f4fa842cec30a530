"""Run one command inside a test host: ``python -I host_enter.py INIT_PID CWD -- CMD...``.

A process cannot move itself into another pid namespace, only its future
children, so this small parent joins the host's namespaces (those of the
host's init, ``INIT_PID`` in the root namespace) and forks the command there.
It stays the process the test holds (``Host.run`` returns its ``Popen``):
SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on, it exits
the way the command did (same code, or killed by the same signal), and the
command dies with SIGKILL if this parent is SIGKILLed (``PR_SET_PDEATHSIG``),
so ``Popen.kill()`` still kills the command and nothing outlives a killed test.

Standard library only, single-threaded (joining a mount namespace needs that).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_NAMESPACES = (("uts", 0x04000000), ("net", 0x40000000), ("pid", 0x20000000), ("mnt", 0x00020000))
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: host_enter.py INIT_PID CWD -- CMD...", file=sys.stderr)
        return 2
    init_pid, cwd, cmd = argv[0], argv[1], argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    # Every namespace file is opened before any is joined: after the mount namespace, /proc is the host's own.
    fds = [(os.open(f"/proc/{init_pid}/ns/{name}", os.O_RDONLY), flag, name) for name, flag in _NAMESPACES]
    for fd, flag, name in fds:
        if libc.setns(fd, flag) != 0:
            err = ctypes.get_errno()
            print(f"host_enter: cannot join the {name} namespace of {init_pid}: {os.strerror(err)}", file=sys.stderr)
            return 126
        os.close(fd)
    os.chdir(cwd)  # joining a mount namespace moves the working directory to its root

    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)  # none may be lost between fork and the handlers
    alive_r, alive_w = os.pipe()  # the child's check that this parent still lives once its death signal is set
    child = os.fork()
    if child == 0:
        os.close(alive_w)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.set_blocking(alive_r, False)
        try:
            if os.read(alive_r, 1) == b"":  # every write end closed: the parent died before prctl
                os._exit(128 + signal.SIGKILL)
        except BlockingIOError:
            pass
        os.close(alive_r)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; the command gets the defaults
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            print(f"host_enter: cannot run {cmd[0]}: {e}", file=sys.stderr)
            os._exit(127)
    os.close(alive_r)

    def forward(received: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone; waitpid below reaps it
            os.kill(child, received)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    _, status = os.waitpid(child, 0)  # retried on EINTR (PEP 475)
    if os.WIFSIGNALED(status):
        died_of = os.WTERMSIG(status)
        if died_of not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
            signal.signal(died_of, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [died_of])
        os.kill(os.getpid(), died_of)
        return 128 + died_of  # a signal whose default is to ignore it
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
