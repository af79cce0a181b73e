"""The real DAG end to end on a reduced config (the session's `tiny_pipeline` run, which the
serving and SLURM tests read too; on the session's SLURM cluster where it has one): every stage's
command runs, the report is built, a second run (local) has nothing to do, and the HTML report
builds."""

from __future__ import annotations

from pathlib import Path

import pytest

REDUCED = Path(__file__).with_name("reduced.yaml")
REPRODUCED_ON_CPU = ("Table 1", "Figure 2", "Figure 3:", "Table 2", "Table 3", "Table 4",
                     "Pre-training")


@pytest.mark.slow
def test_every_stage_runs_and_the_report_is_built(snakemake, tiny_pipeline):
    workdir = tiny_pipeline
    index = (workdir / "reports" / "index.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in index.splitlines()
            if line.startswith("| ") and "artifact" not in line}
    for artifact in REPRODUCED_ON_CPU:
        row = next(v for k, v in rows.items() if k.startswith(artifact))
        assert "| reproduced |" in row, row
    import torch

    if not torch.cuda.is_available():  # the kernel benchmarks say why they did not run
        row = next(v for k, v in rows.items() if k.startswith("Figures 4/5"))
        assert "no CUDA GPU" in row, row
    for stem in ("figure2_loading", "figure3_tpot", "figure4_5_microbench"):
        assert (workdir / "reports" / "figures" / f"{stem}.png").stat().st_size > 10_000

    # a second run has nothing to do
    again = snakemake(workdir, "-n", "--cores", "2", "--configfile", str(REDUCED))
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr

    html = workdir / "reports" / "report.html"
    built = snakemake(workdir, "--cores", "1", "--configfile", str(REDUCED), "--report", str(html))
    assert built.returncode == 0, built.stderr[-3000:]
    assert html.stat().st_size > 100_000
