"""A number read from a result that no run can give is one line naming its file and line or key:
a loss below zero (a cross-entropy is > 0) in a training log, a run summary, a kept summary or
its curves; a ratio of two models' bytes, FLOPs or parameters of zero or below; an evaluation's
sample count that is no whole number >= 0 (it went into the tables' column n as it was)."""

from __future__ import annotations

import pytest

from cli_battery import RUNS, run_cli

PRETRAIN = ["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"]
KEEP = ["pretrain", "--config", "c.yaml", "--runs", "runs", "--keep", "q/runs.csv", "--out", "r/runs.csv"]


def _cell(path, column, value, line=2):
    lines = path.read_text().splitlines()
    head, cells = lines[0].split(","), lines[line - 1].split(",")
    cells[head.index(column)] = value
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("value", ["-1", "0"])
def test_a_training_logs_loss_of_zero_or_below_is_named(finished, failing, value):
    _cell(finished / "runs" / RUNS[1] / "log.csv", "loss", value, line=3)
    failing(PRETRAIN, f"runs/{RUNS[1]}/log.csv:3", f"column loss is {float(value)}, not a number > 0")


@pytest.mark.parametrize("value", ["-1.0", "0.0", "0"])
def test_a_run_summarys_val_loss_of_zero_or_below_is_named(finished, failing, value):
    path = finished / "runs" / RUNS[1] / "summary.json"
    path.write_text(path.read_text().replace('"val_loss": 5.0', f'"val_loss": {value}'))
    failing(PRETRAIN, f"runs/{RUNS[1]}/summary.json", f"'val_loss' is {value}, must be > 0")


@pytest.mark.parametrize("name, column, value", [("runs.csv", "val_loss", "-1"), ("runs.csv", "val_loss", "0"),
                                                 ("curves.csv", "loss", "-1")])
def test_a_kept_summarys_loss_of_zero_or_below_is_named(finished, failing, capsys, name, column, value):
    assert run_cli(PRETRAIN, capsys)[0] == 0
    _cell(finished / "q" / name, column, value)
    failing(KEEP, f"q/{name}:2", f"column {column} is {float(value)}, not a number > 0")


@pytest.mark.parametrize("value", ['"12"', "-1", "2.5", "NaN", "true"])
def test_an_evaluations_sample_count_that_is_no_count_is_named(finished, failing, value):
    path = finished / "ev" / RUNS[1] / "lm_eval.json"
    path.write_text(path.read_text().replace('"effective": 2', f'"effective": {value}'))
    failing(["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"],
            f"ev/{RUNS[1]}/lm_eval.json: n-samples.ptb", "'effective'")


def test_an_evaluations_sample_count_is_still_the_tables_n(finished, capsys):
    import pandas as pd

    assert run_cli(["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"], capsys)[0] == 0
    assert list(pd.read_csv(finished / "et" / "perplexity.csv")["n"]) == [2, 2]


@pytest.mark.parametrize("table, text, names", [
    ("loading.csv", "model,tokens,ratio\nDeepSeek-V3,1,-0.5\n", ["loading.csv:2", "column ratio is -0.5, not a number > 0"]),
    ("loading.csv", "model,tokens,ratio\nDeepSeek-V3,1,0\n", ["loading.csv:2", "column ratio is 0, not a number > 0"]),
    ("table1.csv", "model,flops_ratio,params_ratio\nBaseline-7B,-1.0,1.0\n",
     ["table1.csv:2", "column flops_ratio is -1.0, not a number > 0"]),
    # a configuration's shape beside the ratios: a count (n_shared may be 0, no other)
    ("table1.csv", "model,h_ffn,flops_ratio,params_ratio\nBaseline-7B,,1.0,1.0\n",
     ["table1.csv:2", "column h_ffn is empty or NaN, not a finite number"]),
    ("table1.csv", "model,n_dept,flops_ratio,params_ratio\nBaseline-7B,0,1.0,1.0\n",
     ["table1.csv:2", "column n_dept is 0, not a number > 0"]),
    ("table1.csv", "model,k_dept,flops_ratio,params_ratio\nBaseline-7B,4.5,1.0,1.0\n",
     ["table1.csv:2", "column k_dept is 4.5, not a whole number"]),
])
def test_a_ratio_of_zero_or_below_is_named_by_the_report(work, failing, table, text, names):
    (work / "c.yaml").write_text("report: {dpi: 60}\n")
    (work / "meas" / "h200").mkdir(parents=True)
    (work / "res" / "analysis").mkdir(parents=True)
    (work / "res" / "analysis" / table).write_text(text)
    failing(["report", "--config", "c.yaml", "--results", "res", "--measured", "meas", "--out", "rep"], *names)
