"""Snakemake's per-rule overrides as users give them: a threads count Snakemake takes without a
word (`--set-threads train=0` passed a dry run) or a rule name it drops without one (`trian=8`
left train on its own threads) is one line before any job; expressions stay Snakemake's."""

from __future__ import annotations

import pytest


def _last_line(proc) -> str:
    return [line for line in proc.stderr.splitlines() if line.strip()][-1]


@pytest.mark.parametrize("args, line", [
    (["--set-threads", "train=0"], "resources: --set-threads train=0: threads must be a whole number >= 1"),
    (["--set-threads", "eval=1.5"], "resources: --set-threads eval=1.5: threads must be a whole number >= 1"),
    (["--set-threads", "train=nan"], "resources: --set-threads train=nan: threads must be a whole number >= 1"),
    (["--set-threads", "train=inf"], "resources: --set-threads train=inf: threads must be a whole number >= 1"),
    (["--set-threads", "trian=2"], "resources: --set-threads names 'trian', no rule of this workflow"),
    (["--set-resources", "evl:mem_mb=100"], "resources: --set-resources names 'evl', no rule of this workflow"),
])
def test_a_bad_per_rule_override_is_one_line_before_any_job(snakemake, workdir, args, line):
    proc = snakemake(workdir, "-n", "--cores", "1", *args)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _last_line(proc).startswith(line), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Building DAG" not in proc.stderr
    assert not (workdir / "results").exists()


@pytest.mark.parametrize("args", [["--set-threads", "train=2", "eval=2*3"],
                                  ["--set-resources", "train:mem_mb=100"]])
def test_a_fit_per_rule_override_or_an_expression_is_taken(snakemake, workdir, args):
    proc = snakemake(workdir, "-n", "--cores", "1", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
