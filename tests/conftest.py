"""Shared by every test.

Imports the package before anything else, so that without a CUDA GPU TRITON_INTERPRET=1 is set
before a test module's own imports (transformers, torch._inductor) load Triton.

A scratch working directory that looks like the repository root to Snakemake: the pipeline runs
with the repository root as its working directory (config.yaml, data/ and reports/measured/ are
relative to it). Tests must not touch the real results/, logs/ or reports/, so they link every
other top-level entry into a temporary folder and run there.

`tiny_pipeline`: the whole pipeline on tests/workflow/reduced.yaml, run once per session; the
end-to-end test and the serving test read its results.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import deamoe  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
REDUCED = REPO / "tests" / "workflow" / "reduced.yaml"
OWN_OUTPUTS = {"results", "logs", "reports", ".snakemake", ".git", ".venv", ".pytest_cache"}
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def link_repo(root: Path) -> Path:
    """`root` (created) with every top-level entry of the repository linked in, except outputs."""
    root.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in OWN_OUTPUTS:
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


def run_snakemake(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run Snakemake on the repository's Snakefile in `workdir`; output captured as text."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args],
        cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture
def snakemake():
    """run_snakemake(workdir, *args, timeout=...) -> CompletedProcess (text output captured)."""
    return run_snakemake


def _log_tails(workdir: Path) -> str:
    parts = []
    for log in sorted((workdir / "logs").rglob("*.log")):
        parts.append(f"--- {log.relative_to(workdir)}\n" + "\n".join(
            log.read_text(errors="replace").splitlines()[-15:]))
    return "\n".join(parts)


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Path:
    """The scratch root after `snakemake --cores 2 --configfile tests/workflow/reduced.yaml`
    (every stage, locally); fails, with every log's tail, if that run fails."""
    root = link_repo(tmp_path_factory.mktemp("pipeline") / "main")
    proc = run_snakemake(root, "--cores", "2", "--configfile", str(REDUCED), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:] + "\n" + _log_tails(root)
    return root
