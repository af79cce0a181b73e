"""The test session's Snakemake calls, each a fork of one interpreter that has imported Snakemake.

Every `snakemake` process spends ~3 s on 2 cores importing Snakemake and the executor plugins it
discovers (pandas, SQLModel, ...) before it reads the Snakefile, and the workflow tests call it
about forty times.  Here one server process (this file run as a script) imports it once; each
call is a fork of it that runs `snakemake.cli.main` as a fresh `snakemake` would: its own session
(process group), working directory, environment, argv and stdout/stderr files, its exit status
as a process's.  Nothing of one call reaches the next: each fork starts from the server's state,
which never runs a workflow.

`Forks.run(args, cwd, env, timeout)` -> subprocess.CompletedProcess, as `subprocess.run(...,
capture_output=True, text=True)` of `python -m snakemake *args` would return it (TimeoutExpired,
with the call's process group killed, past `timeout`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(request: dict, snakemake_main) -> None:
    """In the fork: become the `snakemake` process the request describes, run it, exit."""
    code = 1
    try:
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, name, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            os.dup2(os.open(name, flags, 0o644), fd)
        sys.argv = ["snakemake", *request["args"]]
        try:
            snakemake_main(request["args"])
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # anything else: reported like an uncaught exception of a process
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The server: one JSON request a line on stdin; answers the fork's pid, then its exit code."""
    from snakemake.cli import main

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, main)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


class Forks:
    """The client: starts the server on first use; one call at a time."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.buffer = b""

    def _start(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-u", __file__], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            self.buffer = b""

    def _answer(self, timeout: float | None) -> dict | None:
        """The server's next answer, or None past `timeout`."""
        end = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the Snakemake fork server exited ({self.proc.wait()})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        self._start()
        with tempfile.TemporaryDirectory(prefix="snakemake-call-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"args": [str(a) for a in args], "cwd": str(cwd), "env": env,
                       "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            pid = self._answer(None)["pid"]
            answer = self._answer(timeout)
            if answer is None:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._answer(None)
            text = [p.read_text(errors="replace") if p.exists() else "" for p in (out, err)]
        cmd = [sys.executable, "-m", "snakemake", *args]
        if answer is None:
            raise subprocess.TimeoutExpired(cmd, timeout, output=text[0], stderr=text[1])
        return subprocess.CompletedProcess(cmd, answer["rc"], text[0], text[1])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


if __name__ == "__main__":
    serve()
