"""The test session's tiny pipeline, started in the background when the session begins.

`snakemake --configfile tests/workflow/reduced.yaml` (every stage) runs once per session, and the
end-to-end, serving and SLURM tests read its results.  It is started as the session's first
test begins (tests/conftest.py) and runs beside the unit tests, which mostly keep one of CI's two
cores busy: its jobs use the other, and on the session's SLURM cluster its waits on the queue
(the executor plugin's pause before each sbatch, its status queries' back-off) cost no test
time.  The first test that reads it waits for it.

`after(pipeline, run)`: work that needs the finished run and mostly waits on the cluster (the
SLURM test's failure paths), run in the same background thread once the run has succeeded; it
starts its processes with `pipeline.spawn` (so that an interrupted session ends them too); its
result, or the exception it raised, is kept for the test that reads it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import slurm_cluster

REPO = Path(__file__).resolve().parents[1]
REDUCED = REPO / "tests" / "workflow" / "reduced.yaml"


@dataclass
class PipelineRun:
    root: Path                                   # the scratch repository root it ran in
    output: str                                  # Snakemake's stdout + stderr
    cluster: slurm_cluster.LocalSlurm | None     # the cluster it ran on; None: it ran locally
    local_reason: str = ""                       # why it ran locally
    returncode: int = 0


def _log_tails(workdir: Path) -> str:
    parts = []
    for log in sorted([*(workdir / "logs").rglob("*.log"),
                       *(workdir / ".snakemake" / "slurm_logs").rglob("*.log")]):
        parts.append(f"--- {log.relative_to(workdir)}\n" + "\n".join(
            log.read_text(errors="replace").splitlines()[-15:]))
    return "\n".join(parts)


class SessionPipeline:
    """The run in `root` (a scratch repository root): through the SLURM profile on `cluster`, or
    `--cores 2` locally (cluster None, with the reason)."""

    def __init__(self, root: Path, cluster: slurm_cluster.LocalSlurm | None, local_reason: str = "",
                 after: Callable[["SessionPipeline", PipelineRun], Any] | None = None):
        self.root, self.cluster, self.local_reason, self.after = root, cluster, local_reason, after
        self.out_file = root.parent / "snakemake.out"
        self.proc: subprocess.Popen | None = None
        self.spawned: list[subprocess.Popen] = []
        self.thread: threading.Thread | None = None
        self.after_result: Any = None
        self.after_error: BaseException | None = None

    def start(self) -> "SessionPipeline":
        if self.cluster is not None:
            cmd = slurm_cluster.snakemake_command(self.root, "--configfile", str(REDUCED))
            env = self.cluster.submit_env
        else:
            cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(self.root),
                   "--cores", "2", "--configfile", str(REDUCED)]
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = self.spawn(cmd, self.root, env, self.out_file)
        self.thread = threading.Thread(target=self._follow, name="session-pipeline", daemon=True)
        self.thread.start()
        return self

    def spawn(self, cmd: list[str], cwd: Path, env: dict, out_file: Path) -> subprocess.Popen:
        """`cmd` in its own process group, stdout and stderr to `out_file`; ended by stop()."""
        with open(out_file, "w") as out:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.spawned.append(proc)
        return proc

    def _follow(self) -> None:
        self.proc.wait()
        if self.proc.returncode == 0 and self.after is not None:
            try:
                self.after_result = self.after(self, self._run())
            except BaseException as exc:  # kept for the test that reads it
                self.after_error = exc

    def _run(self) -> PipelineRun:
        return PipelineRun(self.root, self.out_file.read_text(errors="replace"), self.cluster,
                           self.local_reason, self.proc.returncode)

    def result(self, timeout: float = 1800) -> PipelineRun:
        """The finished run; AssertionError, with every log's tail, if it failed."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the session's tiny pipeline ran over {timeout:.0f} s") from None
        run = self._run()
        if run.returncode != 0:
            cluster_logs = self.cluster.logs(10) + "\n" if self.cluster else ""
            raise AssertionError(run.output[-4000:] + "\n" + cluster_logs + _log_tails(self.root))
        return run

    def after_done(self, timeout: float = 1200) -> Any:
        """`after`'s result once it has finished (re-raising what it raised)."""
        self.result()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the background work after the pipeline ran over {timeout:.0f} s")
        if self.after_error is not None:
            raise self.after_error
        return self.after_result

    def stop(self) -> None:
        """End the process groups of the run and of `after` that are still going (an interrupted
        session, a run over its time)."""
        for proc in self.spawned:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                except ProcessLookupError:
                    proc.wait()
