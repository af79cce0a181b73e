"""An input file that a command reads where it is there (an evaluation, the curves beside a kept
summary, a device run's table, the shards' meta.json, a run's summary for the report) is absent
only when nothing is at its path.  A link to nothing, a folder or a pipe there is one line naming
it; before, the link was skipped without a word (the run left out of the tables, the kept curves
dropped, the table not imported) or, for meta.json, called missing."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from cli_battery import REPO, RUNS, run_cli, write_config

def _put(path, kind):
    """Something other than a file at `path`: a link to nothing, a folder or a pipe."""
    if path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    {"dangling": lambda: path.symlink_to("nowhere"), "folder": path.mkdir,
     "pipe": lambda: os.mkfifo(path)}[kind]()


WHY = {"dangling": "a link to nowhere, which does not exist", "folder": "a folder, not a file",
       "pipe": "not a regular file"}


@pytest.mark.parametrize("kind", ["dangling", "folder"])
def test_an_evaluation_that_is_no_file_is_named_not_left_out(finished, failing, kind):
    _put(finished / "ev" / RUNS[1] / "lm_eval.json", kind)
    failing(["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"], f"ev/{RUNS[1]}/lm_eval.json",
            WHY[kind])


@pytest.mark.parametrize("kind", ["dangling", "folder", "pipe"])
def test_the_curves_beside_a_kept_summary_that_are_no_file_are_named(finished, failing, capsys, kind):
    assert run_cli(["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"], capsys)[0] == 0
    _put(finished / "q" / "curves.csv", kind)
    failing(["pretrain", "--config", "c.yaml", "--runs", "runs", "--keep", "q/runs.csv", "--out", "r/runs.csv"],
            "q/curves.csv", WHY[kind])


def test_without_curves_beside_it_a_kept_summary_is_still_taken(finished, capsys):
    assert run_cli(["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"], capsys)[0] == 0
    (finished / "q" / "curves.csv").unlink()
    status, err = run_cli(["pretrain", "--config", "c.yaml", "--runs", "runs", "--keep", "q/runs.csv",
                           "--out", "r/runs.csv"], capsys)
    assert status == 0, err


@pytest.mark.parametrize("kind", ["dangling", "folder"])
def test_a_run_summary_that_is_no_file_is_named_as_such_not_as_missing(finished, failing, kind):
    _put(finished / "runs" / RUNS[1] / "summary.json", kind)
    err = failing(["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"],
                  f"runs/{RUNS[1]}/summary.json", WHY[kind])
    assert "missing" not in err


def test_a_device_runs_table_that_is_a_link_to_nothing_is_named_not_skipped(work, failing):
    (work / "imp").mkdir()
    shutil.copy(REPO / "reports" / "measured" / "h200" / "decode_tpot.csv", work / "imp")
    _put(work / "imp" / "microbench.csv", "dangling")
    failing(["bench", "import", "imp", "--dest", "dst", "--sha", "abc1234"], "imp/microbench.csv", WHY["dangling"])


@pytest.mark.parametrize("kind", ["dangling", "folder", "pipe"])
def test_a_shards_meta_json_that_is_no_file_is_named_as_such(work, failing, kind):
    write_config(work / "c.yaml")
    (work / "d").mkdir()
    _put(work / "d" / "meta.json", kind)
    err = failing(["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "d", "--out", "tr"],
                  "d/meta.json", WHY[kind])
    assert "missing" not in err


def test_a_run_summary_the_report_reads_that_is_a_link_to_nothing_is_named(work, failing):
    (work / "c.yaml").write_text("report: {dpi: 60}\n")
    (work / "meas" / "h200").mkdir(parents=True)
    _put(work / "res" / "train" / "pretrain-tiny-deamoe-s0" / "summary.json", "dangling")
    failing(["report", "--config", "c.yaml", "--results", "res", "--measured", "meas", "--out", "rep"],
            "pretrain-tiny-deamoe-s0/summary.json", WHY["dangling"])


def test_a_serving_status_json_kept_as_before(work):
    """(The report's optional JSON reader: nothing there is still None.)"""
    from deamoe.report.sources import read_json

    assert read_json(work / "status.json") is None
    (work / "status.json").write_text(json.dumps({"reason": "x"}))
    assert read_json(work / "status.json") == {"reason": "x"}
