"""Shared by every test.

Imports the package before anything else, so that without a CUDA GPU TRITON_INTERPRET=1 is set
before a test module's own imports (transformers, torch._inductor) load Triton.

A scratch working directory that looks like the repository root to Snakemake: the pipeline runs
with the repository root as its working directory (config.yaml, data/ and reports/measured/ are
relative to it). Tests must not touch the real results/, logs/ or reports/, so they link every
other top-level entry into a temporary folder and run there.

`tiny_pipeline`: the whole pipeline on tests/workflow/reduced.yaml, run once per session in the
background from the session's start (tests/session_pipeline.py); the end-to-end test, the
serving test and the SLURM test read its results.  Where the session has a SLURM cluster
(`slurm`: DEAMOE_SLURM_TEST=1 and slurm-wlm + munge can be had; tests/slurm_cluster.py) that run
goes through workflow/profiles/slurm, every job an sbatch job; otherwise it runs locally.  One
run either way: the cluster adds only its own overhead.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import deamoe  # noqa: F401
import slurm_cluster
import slurm_failure_paths
from session_pipeline import PipelineRun, SessionPipeline
from snakemake_forks import Forks

REPO = Path(__file__).resolve().parents[1]
REDUCED = REPO / "tests" / "workflow" / "reduced.yaml"
OWN_OUTPUTS = {"results", "logs", "reports", ".snakemake", ".git", ".venv", ".pytest_cache"}
# what a developer keeps beside the checkout for the GPU machine (wheels for its Python, corpus
# archives, vLLM's kernel): never part of a test's checkout
DEVICE_ASSETS = {".whl", ".gpu_data", ".peer"}


def link_repo(root: Path) -> Path:
    """`root` (created) with every top-level entry of the repository linked in, except outputs."""
    root.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in OWN_OUTPUTS | DEVICE_ASSETS:
            (root / entry.name).symlink_to(entry)
    (root / "reports").mkdir()
    if (REPO / "reports" / "measured").exists():
        (root / "reports" / "measured").symlink_to(REPO / "reports" / "measured")
    # profiles may name ../shared/... data (as beside the repository in CI and on dev machines)
    if (REPO.parent / "shared").exists() and not (root.parent / "shared").exists():
        (root.parent / "shared").symlink_to(REPO.parent / "shared")
    return root


@pytest.fixture
def workdir(tmp_path) -> Path:
    return link_repo(tmp_path / "main")


@pytest.fixture(scope="session")
def make_workdir():
    """link_repo(root) -> root: a scratch repository root for fixtures wider than one test."""
    return link_repo


def pytest_configure(config):
    """SIGTERM (a CI timeout) unwinds the session like Ctrl-C, so the session fixtures' finally
    blocks and atexit hooks end what they started: the SLURM daemons, the background pipeline."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


_FORKS = Forks()
atexit.register(_FORKS.close)


def run_snakemake(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run Snakemake on the repository's Snakefile in `workdir`; output captured as text.  (Each
    call is a fork of one interpreter that has imported Snakemake: tests/snakemake_forks.py.)"""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return _FORKS.run(["-s", str(REPO / "Snakefile"), "-d", str(workdir), *args], cwd=workdir,
                      env=env, timeout=timeout)


@pytest.fixture
def snakemake():
    """run_snakemake(workdir, *args, timeout=...) -> CompletedProcess (text output captured)."""
    return run_snakemake


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The one-node SLURM cluster started for this session (a LocalSlurm), or the reason there is
    none (a str).  It stops, and only what it started, when the session ends."""
    reason = slurm_cluster.unavailable()
    if reason:
        yield reason
        return
    cluster = slurm_cluster.LocalSlurm(tmp_path_factory.mktemp("slurm"), cpus=2 * (os.cpu_count() or 1))
    atexit.register(cluster.stop)  # also when the test process is interrupted
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session", autouse=True)
def session_pipeline(request, tmp_path_factory):
    """The session's tiny pipeline (tests/session_pipeline.py), started in the background as the
    first test begins, where any collected test reads it; else None.  On the session's SLURM
    cluster the failure-path runs (tests/slurm_failure_paths.py) follow it in the background.  The
    exception where that cluster would not start."""
    if not any("tiny_run" in item.fixturenames for item in request.session.items):
        yield None
        return
    try:
        slurm = request.getfixturevalue("slurm")
    except Exception as exc:  # a cluster that would not start fails the tests that read the run,
        yield exc             # not every test of the session
        return
    root = link_repo(tmp_path_factory.mktemp("pipeline") / "main")
    if isinstance(slurm, slurm_cluster.LocalSlurm):
        scratch = tmp_path_factory.mktemp("failure-paths")
        after = lambda pipeline, run: slurm_failure_paths.failure_paths(pipeline, run, link_repo, scratch)  # noqa: E731
        pipeline = SessionPipeline(root, slurm, after=after)
    else:
        pipeline = SessionPipeline(root, None, local_reason=slurm)
    atexit.register(pipeline.stop)  # also when the test process is interrupted (the run is in
    try:                            # its own process group: a signal to this process misses it)
        yield pipeline.start()
    finally:
        pipeline.stop()


@pytest.fixture(scope="session")
def tiny_run(session_pipeline) -> PipelineRun:
    """`snakemake --configfile tests/workflow/reduced.yaml` (every stage) in a scratch root: through
    the SLURM profile on the session's cluster where there is one, else `--cores 2` locally; fails,
    with every log's tail, if that run fails (or the session's cluster did not start)."""
    if isinstance(session_pipeline, Exception):
        raise session_pipeline
    return session_pipeline.result()


@pytest.fixture(scope="session")
def tiny_pipeline(tiny_run) -> Path:
    """The scratch root after the session's tiny pipeline run (`tiny_run`)."""
    return tiny_run.root


@pytest.fixture
def csv_write_fails(monkeypatch):
    """arm(n): from now on, the n-th DataFrame.to_csv raises OSError (a full disk) -- the tables a
    command publishes together must all stay as they were."""
    import pandas as pd

    def arm(n: int) -> None:
        written, to_csv = [], pd.DataFrame.to_csv

        def failing(self, *args, **kw):
            written.append(1)
            if len(written) == n:
                raise OSError(28, "No space left on device")
            return to_csv(self, *args, **kw)
        monkeypatch.setattr(pd.DataFrame, "to_csv", failing)
    return arm
