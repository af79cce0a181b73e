"""What a user's next command does after the session's complete run (`tiny_pipeline`): a change
of one setting reruns exactly the jobs whose numbers depend on it -- not a training run that
it does not change, and every table that reads it -- and the report then shows the new value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from test_dag import _planned

REDUCED = str(Path(__file__).with_name("reduced.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("args, jobs", [
    # the last N steps the tables average: the tables over training runs, not the training
    (["--config", "ablation={'last_n': 4}"], {"ablation": 1, "pretrain": 1, "quality": 1}),
    # a seed added: its two runs train and are evaluated; the seed-0 runs, their evaluations and
    # the serving of them stay
    (["--config", "pretrain={'seeds': [0, 1]}"],
     {"train": 2, "eval": 2, "pretrain": 1, "eval_tables": 1, "quality": 1}),
    (["--config", "ablation={'seeds': [0, 1]}"], {"train": 6, "ablation": 1}),
    # which seeds get the downstream tasks: only the runs it moves are evaluated again (none here)
    (["--config", "eval={'seeds': [0]}"], {"eval_tables": 1, "quality": 1}),
    # a check's tolerance: no run's recipe changes
    (["--config", "pretrain={'max_budget_deviation': 0.2}"], {"pretrain": 1, "quality": 1}),
    (["-R", "report"], {}),
])
def test_a_change_reruns_exactly_the_jobs_that_depend_on_it(snakemake, tiny_pipeline, args, jobs):
    proc = snakemake(tiny_pipeline, "-n", "--cores", "2", "--configfile", REDUCED, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _planned(proc) == {**jobs, "report": 1, "all": 1}


@pytest.mark.slow
def test_the_report_shows_a_changed_last_n_in_every_table(snakemake, tiny_pipeline, tmp_path):
    root = tmp_path / "main"  # a copy: the session's run stays as other tests read it
    shutil.copytree(tiny_pipeline, root, symlinks=True)
    logs = {p: p.read_bytes() for p in (root / "results" / "train").glob("*/log.csv")}
    proc = snakemake(root, "--cores", "2", "--configfile", REDUCED, "--config", "ablation={'last_n': 3}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for table in ("table4", "pretrain"):
        assert set(pd.read_csv(root / "reports" / "tables" / f"{table}.csv")["last_n"]) == {3}, table
    assert {p: p.read_bytes() for p in logs} == logs  # no run trained again
    back = snakemake(root, "-n", "--cores", "2", "--configfile", REDUCED)  # the setting changed back
    assert _planned(back) == {"ablation": 1, "pretrain": 1, "quality": 1, "report": 1, "all": 1}
