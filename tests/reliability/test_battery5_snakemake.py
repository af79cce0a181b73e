"""The Snakemake layer as users drive it: overrides on the command line and targets by rule name,
each fault one line (`config: ...`, `target: ...`) before any job, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest


def _errors(proc) -> list[str]:
    """stderr's lines, less Snakemake's note on --config and its banner (printed before a target
    is checked)."""
    return [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(" ")
            and not line.startswith(("Config file config.yaml is extended", "Assuming unrestricted",
                                     "SNAKEMAKE", "=====", "Building DAG"))]


@pytest.mark.parametrize("items, key", [
    (["train={steps: 5, steps: 60}"], "train.steps"),  # YAML's last value, without a word
    (["train={steps: 60}", "train={steps: 5}"], "train.steps"),  # Snakemake's merge: the last wins
    (["train=5", "train={steps: 60}"], "train"),
    (["pretrain={sizes: {tiny: {steps: 10}}, sizes: {}}"], "pretrain.sizes"),
    (["profile=tiny", "profile=gpu"], "profile"),
])
def test_a_key_the_config_items_set_twice_is_one_line(snakemake, workdir, items, key):
    """Snakemake merged the items and kept the last value, so the first was dropped without a word
    (a config file with a key twice is refused)."""
    proc = snakemake(workdir, "-n", "--cores", "1", "--config", *items)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _errors(proc) == [f"config: --config sets {key} twice; Snakemake would keep only the last value "
                             "and drop the first without a word: give each key once"], proc.stderr
    assert not (workdir / "results").exists()


def test_items_setting_different_keys_of_a_section_merge(snakemake, workdir):
    proc = snakemake(workdir, "-n", "--cores", "1", "--config", "train={steps: 60}", "train={lr: 0.01}")
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("target, pattern", [
    ("train", "results/train/{run}/summary.json"),
    ("eval", "results/eval/{run}/lm_eval.json"),
    ("serve", "results/serve/{model}"),
    ("quality", "results/quality/{size}/runs.csv"),
])
def test_a_rule_of_many_jobs_named_as_a_target_is_one_line(snakemake, workdir, target, pattern):
    """Snakemake's WorkflowError "Target rules may not contain wildcards" named neither the rule
    nor the output to give instead."""
    wildcard = pattern.split("{")[1].split("}")[0]
    for dry in (["-n"], []):
        proc = snakemake(workdir, *dry, "--cores", "1", target)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert _errors(proc)[-1] == (f"target: {target}: rule {target} runs one job per {{{wildcard}}}; give one "
                                     f"of its outputs with that filled in ({pattern}), or a rule that needs them"), \
            proc.stderr
        assert "Error" not in proc.stderr and "Traceback" not in proc.stderr
        assert not (workdir / "results").exists() and not (workdir / "logs").exists()


@pytest.mark.parametrize("mine, named", [
    ("file", "results/analysis/table1.csv exists and was not written by deamoe"),
    ("folder", "results/analysis/table1.csv is a directory"),
])
def test_a_users_file_at_an_up_to_date_output_is_refused_not_taken(snakemake, workdir, mine, named):
    """With no job to run Snakemake said "Nothing to be done" (exit 0) and ran no onstart, so a
    table of one's own at the output path was taken for the result."""
    out = workdir / "results" / "analysis" / "table1.csv"
    (out if mine == "folder" else out.parent).mkdir(parents=True)
    (out / "notes.txt" if mine == "folder" else out).write_text("my own\n")
    proc = snakemake(workdir, "--cores", "1", "table1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _errors(proc) == [f"refused, nothing run: {named}" + _errors(proc)[0].split(named, 1)[1]], proc.stderr
    assert (out / "notes.txt" if mine == "folder" else out).read_text() == "my own\n"
    assert snakemake(workdir, "-n", "--cores", "1", "table1").returncode == 0  # a dry run only reads


def test_an_up_to_date_output_of_the_workflows_own_is_nothing_to_do(snakemake, workdir):
    assert snakemake(workdir, "--cores", "1", "table1").returncode == 0
    proc = snakemake(workdir, "--cores", "1", "table1")
    assert proc.returncode == 0 and "Nothing to be done" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("path", ["reports/", "reports/tables/table1.md", "report"])
def test_a_report_path_of_another_kind_is_one_line(snakemake, workdir, path):
    """Snakemake's "Report file does not end with .html or .zip" came as a WorkflowError "in file
    workflow/rules/report.smk" (the workflow's wrapper of the reporter), naming no path."""
    proc = snakemake(workdir, "--report", path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _errors(proc)[-1] == (f"report: --report {Path(path)}: not a report file name; give a path ending in "
                                 ".html or .zip (e.g. reports/report.html)"), proc.stderr
    assert "WorkflowError" not in proc.stderr and "report.smk" not in proc.stderr
