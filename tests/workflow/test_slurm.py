"""The SLURM profile on a real (one-node) SLURM cluster started for the test session.

The session's tiny pipeline (tests/workflow/reduced.yaml; `tiny_run` in tests/conftest.py) ran
through workflow/profiles/slurm on that cluster: every job but the workflow's local rules is an
sbatch job of snakemake-executor-plugin-slurm.  Here: each of those jobs completed on the
cluster's partition and every stage has its results; its deterministic results (Table 1,
Figure 2) equal a local run's; two copies of the train command started by srun (one SLURM job
of 2 ranks, torchrun in each) meet in the c10d rendezvous a multi-node job uses and train with
the losses of the pipeline's one-process job; a job that fails names its logs; a cancelled job
is redone (those runs follow the pipeline run in the background: tests/slurm_failure_paths.py).

What the runs change in the profile, all on the command line (nothing edited in place;
slurm_cluster.snakemake_command): the config files (the tiny scale instead of the paper's), the
per-rule threads and memory (a node of a few CPUs instead of 8-GPU nodes) and the executor's
job status queries (squeue, as this cluster has no accounting database for sacct).  The
partition comes from DEAMOE_SLURM_PARTITION, as on a user's cluster.  The node offers twice the
host's cores, so that jobs overlap their start-up (each job starts Snakemake, then Python with
torch, vLLM or lm-eval) instead of queueing behind one another on 2 cores.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from slurm_cluster import PARTITION
from slurm_failure_paths import SUBMITTED

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
REDUCED = Path(__file__).with_name("reduced.yaml")
TRAIN_RUNS = [f"ablation-{v}-s0" for v in ("no2", "no3", "no4", "no5", "no6")] + [
    "pretrain-tiny-baseline-s0", "pretrain-tiny-deamoe-s0"]
STAGE_OUTPUTS = [
    "results/analysis/table1.csv", "results/analysis/loading.csv", "results/data/meta.json",
    *[f"results/train/{run}/summary.json" for run in TRAIN_RUNS],
    "results/ablation/summary.csv", "results/pretrain/summary.csv",
    "results/eval/downstream.csv", "results/eval/perplexity.csv",
    "results/serve/tpot.csv", "results/serve/slo.csv", "results/microbench/status.json",
    "reports/index.md",
]
DETERMINISTIC = ["results/analysis/table1.csv", "results/analysis/loading.csv"]  # Table 1, Figure 2


@pytest.fixture(scope="module")
def slurm_run(tiny_run):
    if tiny_run.cluster is None:
        pytest.skip(tiny_run.local_reason)
    return tiny_run


def test_every_rule_runs_as_a_slurm_job_and_matches_a_local_run(slurm_run, make_workdir, snakemake,
                                                                 tmp_path):
    run_dir, out, cluster = slurm_run.root, slurm_run.output, slurm_run.cluster
    jobs = SUBMITTED.findall(out)
    # every job of the DAG went through sbatch, but the `all` target (no command) and the cheap
    # local rules (the workflow's `localrules:`, run where Snakemake runs)
    stats = out[out.index("Job stats:"):out.index("\ntotal")]
    block = re.search(r"^localrules:\n((?:    \w+,\n)+)",
                      (REPO / "workflow/rules/common.smk").read_text(), re.M).group(1)
    local = {"all", *re.findall(r"\w+", block)}
    planned = sum(int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M) if rule not in local)
    assert planned and len(jobs) == planned and len(set(jobs)) == len(jobs), out[-3000:]
    queue = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %P %T"], env=cluster.env,
                           capture_output=True, text=True).stdout.split("\n")
    states = {line.split()[0]: line.split()[1:] for line in queue if line.strip()}
    for job in jobs:
        assert states[job] == [PARTITION, "COMPLETED"], (job, states.get(job))
    for path in STAGE_OUTPUTS:
        assert (run_dir / path).is_file(), path

    # Table 1 and Figure 2 are deterministic: the same files from a local run of the same config
    # (every column but the run's date stamp)
    local_dir = make_workdir(tmp_path / "local")
    proc = snakemake(local_dir, *DETERMINISTIC, "--cores", "2", "--configfile", str(REDUCED))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for target in DETERMINISTIC:
        here, there = (pd.read_csv(root / target).drop(columns="date") for root in (local_dir, run_dir))
        pd.testing.assert_frame_equal(here, there, check_exact=True, obj=target)


def _train(workdir: Path, cfg: Path, run: str, out: Path, env=None, launcher=()) -> None:
    cmd = [*launcher, sys.executable, "-m", "deamoe", "train", "--config", str(cfg), "--run", run,
           "--data", str(workdir / "results" / "data"), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def _losses(run_dir: Path) -> pd.Series:
    return pd.read_csv(run_dir / "log.csv")["loss"]


def _close(a: pd.Series, b: pd.Series) -> bool:
    """Equal step by step within the FSDP2 test's tolerance."""
    return len(a) == len(b) > 0 and (a - b).abs().max() < 1e-4


def test_two_launchers_meet_in_the_multi_node_rendezvous(slurm_run, tmp_path):
    """The multi-node launch on one node: `srun` starts two copies of the train command (as one per
    node would), which rendezvous (c10d, first node of the step) into one 2-process job; its losses
    equal the pipeline's one-process job's."""
    workdir, cluster, run = slurm_run.root, slurm_run.cluster, "pretrain-tiny-deamoe-s0"
    # the run's config (results/config/resolved-<content hash>.yaml; the newest)
    resolved = max((workdir / "results" / "config").glob("resolved-*.yaml"), key=lambda p: p.stat().st_mtime)
    srun = ["srun", "--ntasks=2", "--cpus-per-task=1", "--mem=3000", f"--partition={PARTITION}",
            "--time=10", "--kill-on-bad-exit=1"]
    _train(workdir, resolved, run, tmp_path / "two", env={**cluster.env, "PYTHONUNBUFFERED": "1"},
           launcher=srun)
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["world_size"] == 2
    assert _close(_losses(tmp_path / "two"), _losses(workdir / "results" / "train" / run))


def test_failed_job_names_its_logs_and_cancelled_job_is_redone(slurm_run, session_pipeline):
    """On a copy of the pipeline run, one training job (Table 4's No.2; the runs of
    tests/slurm_failure_paths.py, made in the background after the pipeline run): a job that
    fails on the cluster fails its rule naming the job's logs; a job cancelled while it runs is
    seen, and the next run redoes it, with the pipeline run's losses."""
    seen = session_pipeline.after_done()
    run, done = seen.run, _losses(slurm_run.root / "results" / "train" / seen.run)

    # a job that fails on the cluster (no CUDA here): its rule fails, naming the job's logs
    out = seen.failed.output
    assert seen.failed.returncode != 0 and "Error in rule train" in out, out[-3000:]
    error = out[out.index("Error in rule train"):]
    assert "FAILED" in error and f"logs/train/{run}.log" in error, error[:3000]
    assert f"slurm_logs/rule_train/{run}/" in error, error[:3000]  # the job's own SLURM log
    assert "no CUDA GPU" in seen.failed_log

    # a job cancelled while it runs: Snakemake sees it, and the next run redoes it
    assert seen.cancelled.returncode != 0 and "CANCELLED" in seen.cancelled.output, seen.cancelled.output[-3000:]
    assert seen.again.returncode == 0, seen.again.output[-3000:]
    assert SUBMITTED.findall(seen.again.output) != [seen.cancelled_job]
    assert len(SUBMITTED.findall(seen.again.output)) == 1
    assert _losses(seen.workdir / "results" / "train" / run).equals(done)
