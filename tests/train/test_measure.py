"""`python -m deamoe.train.measure RUNS OUT` (deamoe.train.measure): the GPU training tables from
finished run folders; a missing or malformed input, or a user's file where it writes, is one line
named before anything is written."""

from __future__ import annotations

import json

import pandas as pd

from deamoe.train.measure import main

SUMMARY = {"run": "pretrain-s-deamoe-s0", "ffn_type": "deamoe", "world_size": 1, "params": 10, "steps": 20,
           "tokens": 640, "tokens_per_s": 100.0, "train_flops_per_token": 60, "mfu_vs_794tflops": 0.1,
           "val_loss": 3.0, "device": "cpu", "torch": "2", "git_sha": "abc", "date": "2026-01-01"}


def _run(folder, **change):
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({**SUMMARY, **change}))
    pd.DataFrame({"step": range(1, 21), "tokens": range(32, 661, 32), "loss": [4.0 - i / 10 for i in range(20)],
                  "step_time_s": [0.1] * 20}).to_csv(folder / "log.csv", index=False)


def test_the_tables_of_finished_runs(tmp_path, capsys):
    _run(tmp_path / "runs" / "a")
    assert main([str(tmp_path / "runs"), str(tmp_path / "out")]) == 0
    assert pd.read_csv(tmp_path / "out" / "train_gpu.csv")["run"].tolist() == ["pretrain-s-deamoe-s0"]
    assert len(pd.read_csv(tmp_path / "out" / "train_curves.csv")) == 2
    assert main([str(tmp_path / "runs"), str(tmp_path / "out")]) == 0  # its own tables: replaced


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    assert main([]) == 2
    assert capsys.readouterr().err.startswith("usage: python -m deamoe.train.measure")
    assert main([str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    assert "nope: no such folder" in capsys.readouterr().err
    _run(tmp_path / "runs" / "a", run=None)
    del_key = json.loads((tmp_path / "runs" / "a" / "summary.json").read_text())
    del del_key["run"]
    (tmp_path / "runs" / "a" / "summary.json").write_text(json.dumps(del_key))
    assert main([str(tmp_path / "runs"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "summary.json: no key 'run'" in err, err
    assert not (tmp_path / "out").exists()


def test_a_users_file_where_it_writes_is_kept(tmp_path, capsys):
    _run(tmp_path / "runs" / "a")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "train_curves.csv").write_text("mine\n")
    assert main([str(tmp_path / "runs"), str(tmp_path / "out")]) == 2
    assert "train_curves.csv exists and was not written by deamoe" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["train_curves.csv"]
    assert (tmp_path / "out" / "train_curves.csv").read_text() == "mine\n"


def test_a_bad_fsdp_log_writes_no_table(tmp_path, capsys):
    """The FSDP pair's logs are read before any table is written: a malformed one is named and
    leaves no train_gpu.csv or train_curves.csv behind (nor replaces earlier ones)."""
    _run(tmp_path / "runs" / "a")
    for name in ("one40", "two40"):
        _run(tmp_path / "runs" / name)  # logs without grad_norm / tokens_per_s
    assert main([str(tmp_path / "runs"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "one40/log.csv: missing column grad_norm" in err, err
    assert not (tmp_path / "out").exists()
    (tmp_path / "runs" / "one40" / "log.csv").write_text("step,loss\n1,abc\n")
    assert main([str(tmp_path / "runs"), str(tmp_path / "out")]) == 2
    assert "one40/log.csv" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
