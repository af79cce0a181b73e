"""A number a stage reads that lies outside what it can be -- an accuracy above 1, a perplexity
below 1 -- is one line naming the file and the key, never a table row (an accuracy of 5 stood in
Table 2 as 500%)."""

from __future__ import annotations

import json

import pytest

from cli_battery import write_config

RUN = "pretrain-tiny-deamoe-s0"


@pytest.mark.parametrize("metric, value, names", [
    ("acc,none", 5, ["results.piqa", "'acc,none' is 5, must be <= 1"]),
    ("acc_norm,none", -0.25, ["results.piqa", "'acc_norm,none' is -0.25, must be >= 0"]),
    ("word_perplexity,none", 0.5, ["results.piqa", "'word_perplexity,none' is 0.5, must be >= 1"]),
    ("bits_per_byte,none", -1.0, ["results.piqa", "'bits_per_byte,none' is -1.0, must be >= 0"]),
])
def test_a_metric_out_of_its_range_is_named(work, failing, metric, value, names):
    write_config(work / "c.yaml")
    (work / "ev" / RUN).mkdir(parents=True)
    (work / "ev" / RUN / "lm_eval.json").write_text(json.dumps({"results": {"piqa": {metric: value}}}))
    failing(["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"], f"ev/{RUN}/lm_eval.json", *names)


@pytest.fixture(scope="module")
def ablation_runs(shards, tmp_path_factory):
    """The six ablation runs of the shards' config (c.yaml), trained (a second or two each)."""
    from deamoe.settings import load_settings
    from deamoe.train.runs import ablation_run_names, run_spec
    from deamoe.train.trainer import train_run

    runs = tmp_path_factory.mktemp("ablation") / "runs"
    s = load_settings(shards / "c.yaml")
    for name in ablation_run_names(s):
        train_run(s, run_spec(s, name), shards / "data", runs / name, progress=False)
    return runs


@pytest.mark.parametrize("value, names", [
    ("-1.0", ["log.csv:3", "column mean_distinct_departments is -1.0, not a number > 0"]),
    ("99.0", ["log.csv:3", "mean_distinct_departments is 99, more than the 3 departments"]),
])
def test_a_count_of_departments_no_routing_gives_is_named(work, failing, shards, ablation_runs, value, names):
    """Table 4's distinct departments per token: a hand-edited log's -1 or 99 (of 4 departments, 3
    experts a token) went into the summary as the run's."""
    import shutil

    shutil.copy(shards / "c.yaml", work / "c.yaml")
    shutil.copytree(ablation_runs, work / "runs", ignore=shutil.ignore_patterns("checkpoint", "state"))
    log = work / "runs" / "ablation-no3-s0" / "log.csv"
    lines = log.read_text().splitlines(keepends=True)
    head = lines[0].rstrip().split(",")
    cells = lines[2].rstrip("\r\n").split(",")
    cells[head.index("mean_distinct_departments")] = value
    lines[2] = ",".join(cells) + "\n"
    log.write_text("".join(lines))
    failing(["ablation", "--config", "c.yaml", "--runs", "runs", "--out", "ab/summary.csv"],
            "runs/ablation-no3-s0/log.csv", *names)
