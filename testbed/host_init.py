"""Process 1 of a test host's pid namespace: ``python -I host_init.py``.

Every orphan of the host is reparented to it, so it reaps them (a host's
process list must not fill with zombies); otherwise it waits. It prints
``ready`` once, after the host's start script mounted its private ``/tmp``
and ``/dev/shm``, which is when ``Host`` may run commands in it. Killing it
with SIGKILL from the root namespace makes the kernel kill every process of
the host: the test's "host dies whole".

Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # no child exit lost between reaping and waiting
    print("ready", flush=True)
    os.close(1)
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        signal.sigtimedwait([signal.SIGCHLD], 3600)


if __name__ == "__main__":
    sys.exit(main())
