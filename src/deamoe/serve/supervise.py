"""`python -m deamoe.serve.supervise CMD...`: run CMD so that it cannot outlive the command
that started it.

deamoe.serve.server starts the vLLM server through this wrapper, as the leader of a new process
group.  The wrapper asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG, even if
the parent is SIGKILLed) and, on SIGTERM / SIGINT / SIGHUP, stops the whole group: SIGINT to the
server, a grace period, then SIGKILL to every process in the group (vLLM's engine core included).
A SIGTERM sent straight to vLLM's API server while it is still starting is not enough: it waits
for its engine core and both hang, which is why the group is killed from outside.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE_S = 10.0


def _set_parent_death_signal(sig: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


USAGE = "usage: python -m deamoe.serve.supervise CMD..."


def main(argv: list[str]) -> int:
    from deamoe.errors import asked_for_help

    if asked_for_help(argv, USAGE):
        return 0
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    parent = os.getppid()
    _set_parent_death_signal(signal.SIGTERM)
    try:
        child = subprocess.Popen(argv)  # same process group as this wrapper
    except OSError as exc:  # no such program, not executable: one line, the shell's exit status
        print(f"error: python -m deamoe.serve.supervise: cannot run {argv[0]!r} "
              f"({exc.strerror or exc})", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    stopping = False

    def stop(signum=None, frame=None):
        nonlocal stopping
        if stopping:
            return
        stopping = True
        try:
            child.send_signal(signal.SIGINT)
            child.wait(timeout=GRACE_S)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)  # everything left, this wrapper last

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    while child.poll() is None:
        if os.getppid() != parent:  # the parent died before PR_SET_PDEATHSIG took effect
            stop()
        time.sleep(0.5)
    return child.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
