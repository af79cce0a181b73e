"""No command overwrites what it did not write: a foreign file or folder where a command would
write is one line naming it, before any work, and the user's tree is left exactly as it was."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from deamoe.io import write_json

from cli_battery import REPO, run_cli, train_config, tree, write_config

MINE = "the user's own file"


def _put(path, content=MINE):
    """A file the user wrote (or, content None, a folder holding one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        path.mkdir()
        (path / "notes.txt").write_text(MINE)
    else:
        path.write_text(content)
    return path


TRAIN = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "DATA", "--out", "run"]


@pytest.mark.parametrize("where", ["run/log.csv", "run/summary.json", "run/checkpoint", "run/train.lock",
                                   "run/state/resume.pt"])
def test_training_refuses_a_foreign_file_in_its_run_folder_before_the_first_step(work, failing, shards, where):
    train_config(work / "c.yaml", shards)
    _put(work / where, None if where.endswith("checkpoint") else MINE)
    argv = [str(shards / "data") if a == "DATA" else a for a in TRAIN]
    failing(argv, where)


def test_training_refuses_a_folder_holding_another_runs_results(work, failing, shards):
    train_config(work / "c.yaml", shards)
    write_json(work / "run" / "summary.json", {"run": "ablation-no2-s0"})  # the project's own file
    argv = [str(shards / "data") if a == "DATA" else a for a in TRAIN]
    failing(argv, "run", "ablation-no2-s0", "another --out")


@pytest.mark.parametrize("where", ["d/train.bin", "d/val.bin", "d/meta.json", "d/tokenizer"])
def test_data_refuses_a_foreign_shard_or_tokenizer(work, failing, where):
    write_config(work / "c.yaml")
    _put(work / where, None if where.endswith("tokenizer") else MINE)
    failing(["data", "--config", "c.yaml", "--out", "d"], where)


@pytest.mark.parametrize("argv, where", [
    (["table1", "--models", "Baseline-7B", "--out", "t.csv"], "t.csv"),
    (["loading", "--models", "Baseline-7B", "--tokens", "1", "--trials", "2", "--out", "l.csv"], "l.csv"),
    (["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e"], "e/lm_eval.json"),
    (["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"], "et/downstream.csv"),
    (["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"], "et/perplexity.csv"),
    (["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv"], "sv"),
    (["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv", "--log", "s.log"],
     "s.log"),
    (["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv", "--log", "s.log"],
     "s.client.log"),
    (["serve-tables", "--config", "c.yaml", "--in", "sin", "--out", "st"], "st/slo.csv"),
    (["ablation", "--config", "c.yaml", "--runs", "runs", "--out", "q/summary.csv"], "q/curves.csv"),
    (["pretrain", "--config", "c.yaml", "--runs", "runs", "--eval", "ev", "--out", "q/runs.csv"], "q/evals.csv"),
    (["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"], "q/runs.csv"),
    (["microbench", "--config", "c.yaml", "--out", "mb"], "mb/status.json"),
    (["report", "--config", "c.yaml", "--results", "runs", "--measured", "runs", "--out", "rep"], "rep/index.md"),
    (["report", "--config", "c.yaml", "--results", "runs", "--measured", "runs", "--out", "rep"],
     "rep/tables/table1.md"),
])
def test_every_command_refuses_a_foreign_output_before_any_work(work, failing, argv, where):
    write_config(work / "c.yaml")
    for folder in ("ck", "ev", "sin", "runs"):
        (work / folder).mkdir()
    _put(work / where, None if where == "sv" else MINE)
    failing(argv, where)


def test_evaluation_of_another_model_is_not_replaced(work, failing):
    write_config(work / "c.yaml")
    write_json(work / "e" / "lm_eval.json", {"results": {}, "deamoe": {"model": "baseline"}})
    failing(["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e"],
            "e/lm_eval.json", "baseline")


def test_serving_results_of_another_model_are_not_replaced(work, failing):
    from deamoe.io import atomic_dir

    write_config(work / "c.yaml")
    with atomic_dir(work / "sv") as tmp:
        (tmp / "c1.json").write_text(json.dumps({
            "model": "baseline", "concurrency": 1, "tpot_mean_ms": 1.0, "tpot_median_ms": 1.0, "tpot_p99_ms": 1.0,
            "ttft_ms": 1.0, "output_tok_s": 1.0, "backend": "b", "device": "cpu"}))
    failing(["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv"],
            "sv", "baseline")


@pytest.mark.parametrize("argv", [
    ["table1", "--models", "Baseline-7B", "--out", "reports/measured/h200/microbench.csv"],
    ["table1", "--models", "Baseline-7B", "--out", "reports/measured/h200/new.csv"],
    ["report", "--config", "c.yaml", "--results", "runs", "--measured", "runs", "--out", "reports/measured"],
    ["data", "--config", "c.yaml", "--out", "reports/measured/h200"],
])
def test_nothing_but_a_tables_owner_writes_under_reports_measured(work, failing, argv):
    write_config(work / "c.yaml")
    (work / "runs").mkdir()
    _put(work / "reports" / "measured" / "h200" / "microbench.csv", (REPO / "reports/measured/h200/microbench.csv")
         .read_text())
    failing(argv, "reports/measured")


def _device_run(folder, **change):
    """A device run's microbench.csv, the committed table's first rows with `change` applied."""
    df = pd.read_csv(REPO / "reports" / "measured" / "h200" / "microbench.csv").head(3)
    for column, value in change.items():
        if value is None:
            df = df.drop(columns=[column])
        else:
            df[column] = df[column].astype(object)
            df.loc[1, column] = value
    folder.mkdir()
    df.to_csv(folder / "microbench.csv", index=False)


@pytest.mark.parametrize("change, names", [
    ({"deamoe_us": None}, ["run/microbench.csv", "deamoe_us"]),
    ({"baseline_us": float("nan")}, ["run/microbench.csv:3", "baseline_us"]),
    ({"deamoe_us": "fast"}, ["run/microbench.csv:3", "deamoe_us", "'fast'"]),
    ({"git_sha": float("nan")}, ["run/microbench.csv:3", "git_sha"]),
])
def test_import_keeps_the_committed_table_when_the_new_one_is_malformed(work, failing, change, names):
    committed = _put(work / "dest" / "microbench.csv", (REPO / "reports/measured/h200/microbench.csv").read_text())
    _device_run(work / "run", **change)
    failing(["bench", "import", "run", "--sha", "abc1234", "--dest", "dest"], *names)
    assert committed.read_text() == (REPO / "reports/measured/h200/microbench.csv").read_text()


def test_import_replaces_the_committed_table_with_a_valid_one(work, capsys):
    dest = "reports/measured/h200"
    _put(work / dest / "microbench.csv", "model,batch\n")
    _device_run(work / "run")
    status, err = run_cli(["bench", "import", "run", "--sha", "abc1234", "--dest", dest], capsys)
    assert status == 0, err
    assert len(pd.read_csv(work / dest / "microbench.csv")) == 3


def test_import_merge_keeps_the_points_the_run_did_not_measure(work, capsys):
    # a run of the committed table's first three points, one of them changed, merged into the
    # whole table: the other points stay in their place, the run's replace their own
    dest = "reports/measured/h200"
    committed = (REPO / dest / "microbench.csv").read_text()
    _put(work / dest / "microbench.csv", committed)
    _device_run(work / "run", baseline_us=1.0)
    status, err = run_cli(["bench", "import", "run", "--sha", "abc1234", "--dest", dest, "--merge"], capsys)
    assert status == 0, err
    old, got = pd.read_csv(REPO / dest / "microbench.csv"), pd.read_csv(work / dest / "microbench.csv")
    assert len(got) == len(old)
    assert list(zip(got.model, got.batch)) == list(zip(old.model, old.batch))  # the same order
    assert got.iloc[1]["baseline_us"] == 1.0 and old.iloc[1]["baseline_us"] != 1.0
    pd.testing.assert_frame_equal(got.iloc[3:].reset_index(drop=True), old.iloc[3:].reset_index(drop=True),
                                  check_dtype=False, rtol=1e-9)  # as written back (float format)


def test_merge_puts_a_new_point_after_the_kept_ones():
    from deamoe.bench.tools import _merged

    old = pd.DataFrame({"model": ["A", "A", "B"], "batch": [4, 16, 4], "us": [1.0, 2.0, 3.0]})
    new = pd.DataFrame({"model": ["C", "A"], "batch": [4, 16], "us": [9.0, 8.0]})
    got = _merged(old, new)
    assert list(zip(got.model, got.batch, got.us)) == [("A", 4, 1.0), ("A", 16, 8.0), ("B", 4, 3.0),
                                                       ("C", 4, 9.0)]


def test_import_outside_reports_measured_never_replaces_a_users_file(work, failing, capsys):
    _put(work / "mine" / "decode_tpot.csv")
    _device_run(work / "run")
    (work / "run" / "decode_tpot.csv").write_text((REPO / "reports/measured/h200/decode_tpot.csv").read_text())
    # refused before either table is written: no half-done import
    failing(["bench", "import", "run", "--sha", "abc1234", "--dest", "mine"], "mine/decode_tpot.csv")
    # its own tables there it replaces (a second import into the same folder)
    for _ in range(2):
        status, err = run_cli(["bench", "import", "run", "--sha", "abc1234", "--dest", "new"], capsys)
        assert status == 0, err
    assert len(pd.read_csv(work / "new" / "microbench.csv")) == 3


def test_import_outside_a_checkout_asks_for_the_sha(work, failing, monkeypatch):
    from deamoe.bench import tools

    monkeypatch.setattr(tools, "_head_sha", lambda: "")
    _device_run(work / "run", git_sha="unknown")
    failing(["bench", "import", "run", "--dest", "d"], "microbench.csv", "git_sha 'unknown'", "--sha")


def test_merge_into_a_decode_table_keeps_it_when_the_new_rows_are_malformed(work):
    from deamoe.bench.decode import merge_tpot
    from deamoe.errors import DataError

    into = _put(work / "decode_tpot.csv", (REPO / "reports/measured/h200/decode_tpot.csv").read_text())
    new = pd.read_csv(into).head(2)
    new.loc[0, "deamoe_tpot_ms"] = float("inf")
    new.to_csv(work / "new.csv", index=False)
    before = tree(work)
    with pytest.raises(DataError, match=r"new\.csv:2: column deamoe_tpot_ms is inf"):
        merge_tpot(work / "new.csv", into)
    assert tree(work) == before


@pytest.mark.parametrize("earlier", [True, False], ids=["over earlier data", "into a new folder"])
def test_data_stopped_after_its_shards_leaves_the_earlier_data_or_none(work, shards, capsys, monkeypatch, earlier):
    import deamoe.provenance
    from deamoe.train.data import TokenData

    train_config(work / "c.yaml", shards)
    if earlier:
        assert run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)[0] == 0
    before = tree(work)

    def stop(*args, **kw):  # a stop after the new shards and tokenizer, before meta.json
        raise KeyboardInterrupt
    monkeypatch.setattr(deamoe.provenance, "provenance", stop)
    assert run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)[0] == 130
    assert tree(work) == before  # the earlier shards, tokenizer and meta.json, byte for byte
    if earlier:
        TokenData.open(work / "d")


def test_data_replaces_its_own_shards(work, shards, capsys):
    train_config(work / "c.yaml", shards)
    for _ in range(2):  # the second run replaces the first's shards, tokenizer and meta.json
        status, err = run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)
        assert status == 0, err
    assert sorted(p.name for p in (work / "d").iterdir()) == [
        ".deamoe-output", "meta.json", "tokenizer", "train.bin", "val.bin"]
