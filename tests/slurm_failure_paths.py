"""The SLURM profile's failure paths, on a copy of the session's pipeline run on its cluster.

One training job (Table 4's No.2) three times, through the slurm profile as a user runs it
(slurm_cluster.snakemake_command): a job that fails on the cluster (train.device cuda on a host
without CUDA), a job cancelled with scancel while it runs, and the next run, which redoes it.
Mostly waiting on the queue (the executor plugin's pause before each sbatch, its status queries'
back-off), so the session runs it in the background once its pipeline run is done
(tests/session_pipeline.py); tests/workflow/test_slurm.py checks what it saw.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_cluster import LocalSlurm, snakemake_command

REDUCED = Path(__file__).resolve().parent / "workflow" / "reduced.yaml"
SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+)")
RUN = "ablation-no2-s0"


@dataclass
class Outcome:
    returncode: int
    output: str            # Snakemake's stdout + stderr


@dataclass
class FailurePaths:
    workdir: Path          # the copy of the pipeline run they ran in
    run: str               # the training run's name
    failed: Outcome        # its job failed on the cluster (--retries 0)
    failed_log: str        # the rule's log after that
    cancelled: Outcome     # its job was cancelled while it ran (--retries 0)
    cancelled_job: str     # the SLURM job id cancelled
    again: Outcome         # the next run


def copy_run(src: Path, link_repo, dest: Path) -> Path:
    """A scratch root holding the results of the pipeline run in `src` and Snakemake's records of
    them (so only what a run changes reruns there; the session's run stays as it is)."""
    root = link_repo(dest)
    shutil.copytree(src / "results", root / "results", symlinks=True)
    shutil.copytree(src / ".snakemake" / "metadata", root / ".snakemake" / "metadata")
    return root


def _snakemake(pipeline, cluster: LocalSlurm, workdir: Path, name: str, *args: str) -> subprocess.Popen:
    # (targets first: --configfile takes several values)
    cmd = snakemake_command(workdir, *args, "--configfile", str(REDUCED))
    return pipeline.spawn(cmd, workdir, cluster.submit_env, workdir.parent / f"{name}.out")


def _finish(proc: subprocess.Popen, out_file: Path, timeout: float = 600) -> Outcome:
    proc.wait(timeout=timeout)
    return Outcome(proc.returncode, out_file.read_text(errors="replace"))


def _running_job(cluster: LocalSlurm, proc: subprocess.Popen, out_file: Path, timeout: float = 300) -> str:
    """The SLURM job the Snakemake process `proc` submitted, once SLURM runs it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        jobs = SUBMITTED.findall(out_file.read_text(errors="replace"))
        if jobs:
            state = subprocess.run(["squeue", "-h", "-j", jobs[0], "-o", "%T"], env=cluster.env,
                                   capture_output=True, text=True).stdout.strip()
            if state == "RUNNING":
                return jobs[0]
        time.sleep(0.2)
    raise AssertionError(f"no running SLURM job of {out_file.name} (snakemake exit {proc.poll()})")


def failure_paths(pipeline, run, link_repo, scratch: Path) -> FailurePaths:
    """The three runs, in order, in a copy of `run` (a PipelineRun on its cluster) made under
    `scratch` with `link_repo`; their processes started by `pipeline` (a SessionPipeline)."""
    cluster = run.cluster
    workdir = copy_run(run.root, link_repo, scratch / "main")
    target = f"results/train/{RUN}/summary.json"

    # a job that fails on the cluster (no CUDA here)
    proc = _snakemake(pipeline, cluster, workdir, "failed", target, "--retries", "0",
                      "--config", "train={device: cuda}")
    failed = _finish(proc, workdir.parent / "failed.out")
    failed_log = (workdir / "logs" / "train" / f"{RUN}.log").read_text(errors="replace")

    # a job cancelled while it runs
    out_file = workdir.parent / "cancelled.out"
    proc = _snakemake(pipeline, cluster, workdir, "cancelled", target, "--retries", "0")
    job = _running_job(cluster, proc, out_file)
    subprocess.run(["scancel", job], env=cluster.env, check=True)
    cancelled = _finish(proc, out_file, timeout=300)

    again = _finish(_snakemake(pipeline, cluster, workdir, "again", target), workdir.parent / "again.out")
    return FailurePaths(workdir, RUN, failed, failed_log, cancelled, job, again)
