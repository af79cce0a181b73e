"""Summary tables of finished runs: a length's further seeds, trained in a later call, joined
beside the rows of an earlier table (pretrain --keep)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from deamoe.cli import main
from deamoe.settings import load_settings
from deamoe.train.runs import run_spec
from deamoe.train.trainer import train_run


def _config(tmp_path: Path, make_config, extra_seeds: list) -> str:
    path = Path(make_config(tmp_path, steps=3))
    doc = yaml.safe_load(path.read_text())
    doc["pretrain"]["sizes"]["t"].update(lengths=[4], extra_seeds=extra_seeds)
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _train(config: str, names: list[str], shards, runs: Path) -> None:
    s = load_settings(config)
    for name in names:
        train_run(s, run_spec(s, name), shards, runs / name, progress=False)


def _join(config: str, runs: Path, out: Path, *more: str) -> int:
    return main(["pretrain", "--config", config, "--runs", str(runs), "--size", "t",
                 "--steps", "4", "--out", str(out), *more])


def test_extra_seeds_of_a_later_call_join_beside_the_kept_rows(tmp_path, make_config, shards, capsys):
    first = _config(tmp_path / "first", make_config, [])
    s0 = ["pretrain-t-baseline-s0-4steps", "pretrain-t-deamoe-s0-4steps"]
    _train(first, s0, shards, tmp_path / "runs1")
    assert _join(first, tmp_path / "runs1", tmp_path / "a" / "runs.csv") == 0
    earlier = pd.read_csv(tmp_path / "a" / "runs.csv")
    assert list(earlier["run"]) == s0

    later = _config(tmp_path / "later", make_config, [{"steps": 4, "seeds": [1]}])
    s1 = ["pretrain-t-baseline-s1-4steps", "pretrain-t-deamoe-s1-4steps"]
    _train(later, s1, shards, tmp_path / "runs2")  # only the new seed's runs in this call
    # without the earlier table the join names the run it lacks
    assert _join(later, tmp_path / "runs2", tmp_path / "b" / "runs.csv") == 2
    assert "pretrain-t-baseline-s0-4steps" in capsys.readouterr().err
    assert _join(later, tmp_path / "runs2", tmp_path / "b" / "runs.csv",
                 "--keep", str(tmp_path / "a" / "runs.csv")) == 0
    joined = pd.read_csv(tmp_path / "b" / "runs.csv")
    assert list(joined["run"]) == s0 + s1
    pd.testing.assert_frame_equal(joined.iloc[:2], earlier)  # the kept rows as they were
    assert list(joined["seed"]) == [0, 0, 1, 1] and (joined["val_loss"] > 0).all()
    curves = pd.read_csv(tmp_path / "b" / "curves.csv")  # the earlier curves.csv beside a/runs.csv
    assert sorted(set(curves["run"])) == sorted(s0 + s1) and len(curves) == 4 * 4


def test_a_length_with_its_first_seed_trained_joins_that_seed_then_the_rest(tmp_path, make_config, shards,
                                                                            capsys):
    # the plan's seeds 0 and 1 at a length, seed 0 trained in one session and seed 1 in a later
    # one: --seeds joins the first alone (the plan named the run it lacked), --keep the rest
    config = _config(tmp_path, make_config, [])
    doc = yaml.safe_load(Path(config).read_text())
    doc["pretrain"]["sizes"]["t"]["seeds"] = [0, 1]
    Path(config).write_text(yaml.safe_dump(doc))
    s0 = ["pretrain-t-baseline-s0-4steps", "pretrain-t-deamoe-s0-4steps"]
    s1 = ["pretrain-t-baseline-s1-4steps", "pretrain-t-deamoe-s1-4steps"]
    _train(config, s0, shards, tmp_path / "runs1")
    assert _join(config, tmp_path / "runs1", tmp_path / "a" / "runs.csv") == 2
    assert "pretrain-t-baseline-s1-4steps" in capsys.readouterr().err
    assert _join(config, tmp_path / "runs1", tmp_path / "a" / "runs.csv", "--seeds", "0") == 0
    first = pd.read_csv(tmp_path / "a" / "runs.csv")
    assert list(first["run"]) == s0
    assert _join(config, tmp_path / "runs1", tmp_path / "x.csv", "--seeds", "0,2") == 2
    assert "--seeds 2: not seeds of t at 4 steps (its seeds there: 0, 1)" in capsys.readouterr().err
    _train(config, s1, shards, tmp_path / "runs2")
    assert _join(config, tmp_path / "runs2", tmp_path / "b" / "runs.csv",
                 "--keep", str(tmp_path / "a" / "runs.csv")) == 0
    joined = pd.read_csv(tmp_path / "b" / "runs.csv")
    assert list(joined["run"]) == s0 + s1
    pd.testing.assert_frame_equal(joined.iloc[:2], first)


def test_keep_refuses_eval_and_a_table_that_is_not_a_summary(tmp_path, make_config, capsys):
    config = _config(tmp_path, make_config, [{"steps": 4, "seeds": [1]}])
    (tmp_path / "runs").mkdir()
    assert _join(config, tmp_path / "runs", tmp_path / "o.csv", "--keep", "k.csv", "--eval", "e") == 2
    assert "--keep and --eval do not go together" in capsys.readouterr().err
    (tmp_path / "k.csv").write_text("run,size\nx,t\n")
    assert _join(config, tmp_path / "runs", tmp_path / "o.csv", "--keep", str(tmp_path / "k.csv")) == 2
    err = capsys.readouterr().err.strip()
    assert "k.csv: missing column(s) model, seed, git_sha, date" in err and "\n" not in err


@pytest.mark.parametrize("extra, message", [
    ([{"steps": 5, "seeds": [1]}], "pretrain.sizes.t.extra_seeds[0].steps=5 is not a length of the size"),
    ([{"steps": 4, "seeds": [0]}], "pretrain.sizes.t.extra_seeds[0].seeds: seed 0 is already one of"),
    ([{"steps": 4, "seeds": [1]}, {"steps": 4, "seeds": [2]}], "extra_seeds[1].steps=4 is given twice"),
])
def test_bad_extra_seeds_are_one_line_naming_the_entry(tmp_path, make_config, extra, message, capsys):
    config = _config(tmp_path, make_config, extra)
    (tmp_path / "runs").mkdir()
    assert _join(config, tmp_path / "runs", tmp_path / "o.csv") == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def _ablation_config(tmp_path: Path, make_config, steps: int) -> str:
    """A config of one ablation variant (No.2: trained as itself) at `steps` steps."""
    path = Path(make_config(tmp_path, steps=steps))
    doc = yaml.safe_load(path.read_text())
    doc["ablation"]["variants"] = ["no2"]
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _ablation(config: str, runs: Path, out: Path) -> int:
    return main(["ablation", "--config", config, "--runs", str(runs), "--out", str(out)])


def test_ablation_refuses_runs_trained_with_another_config(tmp_path, make_config, shards, capsys):
    trained = _ablation_config(tmp_path / "trained", make_config, steps=3)
    _train(trained, ["ablation-no2-s0"], shards, tmp_path / "runs")
    other = _ablation_config(tmp_path / "other", make_config, steps=5)
    capsys.readouterr()  # the training's progress
    # it would average the 3 rows there are and call them last_n=3 of a 5-step run
    assert _ablation(other, tmp_path / "runs", tmp_path / "a" / "summary.csv") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "run ablation-no2-s0" in err and "trained for 3 steps" in err and f"{other} gives it 5" in err
    assert not (tmp_path / "a").exists()
    assert _ablation(trained, tmp_path / "runs", tmp_path / "a" / "summary.csv") == 0  # its own config


def test_ablation_accepts_a_time_boxed_run(tmp_path, make_config, shards):
    config = _ablation_config(tmp_path, make_config, steps=500)
    s = load_settings(config)
    train_run(s, run_spec(s, "ablation-no2-s0"), shards, tmp_path / "runs" / "ablation-no2-s0", progress=False,
              max_seconds=1e-9)  # planned 500 steps, stopped after the first
    assert _ablation(config, tmp_path / "runs", tmp_path / "a" / "summary.csv") == 0
    table = pd.read_csv(tmp_path / "a" / "summary.csv")
    assert list(table["run"]) == ["ablation-no2-s0"] and table["steps"].iloc[0] < 500
    # last_n (3) is more steps than the run has: the table says how many it averaged
    logged = pd.read_csv(tmp_path / "runs" / "ablation-no2-s0" / "log.csv")
    assert len(logged) < 3 and table["last_n"].iloc[0] == len(logged)
    assert table["loss_last_n"].iloc[0] == pytest.approx(logged["loss"].mean())


def test_pretrain_refuses_runs_trained_with_another_config(tmp_path, make_config, shards, capsys):
    # the tokens axis's joins alike: a run planned for 4 steps read as one of 6 is refused
    trained = _config(tmp_path / "trained", make_config, [])
    _train(trained, ["pretrain-t-baseline-s0-4steps", "pretrain-t-deamoe-s0-4steps"], shards,
           tmp_path / "runs")
    other = Path(_config(tmp_path / "other", make_config, []))
    other.write_text(other.read_text().replace("- 4\n", "- 6\n"))  # lengths: [6]
    capsys.readouterr()
    assert main(["pretrain", "--config", str(other), "--runs", str(tmp_path / "runs"), "--size", "t",
                 "--steps", "6", "--out", str(tmp_path / "o.csv")]) == 2  # no 6-step runs there
    (tmp_path / "runs" / "pretrain-t-baseline-s0-4steps").rename(tmp_path / "runs" / "pretrain-t-baseline-s0-6steps")
    (tmp_path / "runs" / "pretrain-t-deamoe-s0-4steps").rename(tmp_path / "runs" / "pretrain-t-deamoe-s0-6steps")
    capsys.readouterr()
    assert main(["pretrain", "--config", str(other), "--runs", str(tmp_path / "runs"), "--size", "t",
                 "--steps", "6", "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "trained for 4 steps" in err and "gives it 6" in err and "\n" not in err


def test_a_gpu_calls_short_sha_joins_in_the_12_digit_form(tmp_path, make_config, shards, monkeypatch):
    """A GPU call records DEAMOE_GIT_SHA as given (its tree has no .git): rows of 7 digits were
    joined beside rows of 12 and set by hand; where this checkout knows the commit the table
    records it in the 12-digit form, the kept rows too."""
    from deamoe import provenance

    head = provenance._git(Path(provenance.__file__).parent, "rev-parse", "--short=12", "HEAD")
    if not head:
        pytest.skip("a checkout without git")
    monkeypatch.setenv("DEAMOE_GIT_SHA", head[:7])
    provenance.git_sha.cache_clear()
    config = _config(tmp_path, make_config, [{"steps": 4, "seeds": [1]}])
    s0 = ["pretrain-t-baseline-s0-4steps", "pretrain-t-deamoe-s0-4steps"]
    s1 = ["pretrain-t-baseline-s1-4steps", "pretrain-t-deamoe-s1-4steps"]
    _train(config, s0 + s1, shards, tmp_path / "runs")
    provenance.git_sha.cache_clear()
    assert _join(config, tmp_path / "runs", tmp_path / "a" / "runs.csv") == 0
    table = pd.read_csv(tmp_path / "a" / "runs.csv", dtype={"git_sha": str})
    assert set(table["git_sha"]) == {head}
    # a kept table of short rows (as joined before) reads in the same form
    kept = table[table["seed"] == 0].assign(git_sha=head[:7])
    kept.to_csv(tmp_path / "short.csv", index=False)
    for run in s0:
        (tmp_path / "runs" / run / "summary.json").unlink()
    assert _join(config, tmp_path / "runs", tmp_path / "b" / "runs.csv",
                 "--keep", str(tmp_path / "short.csv")) == 0
    assert set(pd.read_csv(tmp_path / "b" / "runs.csv", dtype={"git_sha": str})["git_sha"]) == {head}


def test_ablation_refuses_a_log_cut_short(tmp_path, make_config, shards, capsys):
    # a log.csv cut at a line end (a copy stopped part-way) read as whole: its last rows' loss
    # averaged as the run's loss_last_n, its last step as the run's steps, without a word
    config = _ablation_config(tmp_path, make_config, steps=3)
    _train(config, ["ablation-no2-s0"], shards, tmp_path / "runs")
    log = tmp_path / "runs" / "ablation-no2-s0" / "log.csv"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))  # the header, steps 1-2
    capsys.readouterr()
    assert _ablation(config, tmp_path / "runs", tmp_path / "a" / "summary.csv") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert str(log) in err and "ends at step 2" in err and "took 3 steps" in err
    assert not (tmp_path / "a").exists()


def test_a_size_whose_baselines_are_another_sizes_finds_them_in_that_sizes_table(tmp_path, make_config,
                                                                                  shards, capsys):
    # smallrms' baselines are small's runs: a later seed's RMSNorm join needs small's new baseline
    # row, which is in small's table, not in smallrms' (one --keep could not give both)
    def config(extra: list) -> str:
        path = Path(make_config(tmp_path / ("later" if extra else "first"), steps=3))
        doc = yaml.safe_load(path.read_text())
        t = doc["pretrain"]["sizes"]["t"]
        t.update(lengths=[4], extra_seeds=extra)
        doc["pretrain"]["sizes"]["trms"] = {**t, "deamoe": {**t["deamoe"], "operator": "rmsnorm"}}
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    def join(cfg, size, runs, out, *more):
        return main(["pretrain", "--config", cfg, "--runs", str(runs), "--size", size, "--steps", "4",
                     "--out", str(out), *more])

    first, later = config([]), config([{"steps": 4, "seeds": [1]}])
    _train(first, ["pretrain-t-baseline-s0-4steps", "pretrain-t-deamoe-s0-4steps", "pretrain-trms-deamoe-s0-4steps"],
           shards, tmp_path / "runs1")
    assert join(first, "t", tmp_path / "runs1", tmp_path / "a" / "t" / "runs.csv") == 0
    assert join(first, "trms", tmp_path / "runs1", tmp_path / "a" / "trms" / "runs.csv") == 0
    # seed 1: small's pair in one call, joined; the RMSNorm DeaMoE alone in another
    _train(later, ["pretrain-t-baseline-s1-4steps", "pretrain-t-deamoe-s1-4steps"], shards, tmp_path / "runs2")
    assert join(later, "t", tmp_path / "runs2", tmp_path / "b" / "t" / "runs.csv",
                "--keep", str(tmp_path / "a" / "t" / "runs.csv")) == 0
    _train(later, ["pretrain-trms-deamoe-s1-4steps"], shards, tmp_path / "runs3")
    assert join(later, "trms", tmp_path / "runs3", tmp_path / "b" / "trms" / "runs.csv",
                "--keep", str(tmp_path / "a" / "trms" / "runs.csv")) == 2
    assert "pretrain-t-baseline-s1-4steps" in capsys.readouterr().err  # the twin it lacks
    assert join(later, "trms", tmp_path / "runs3", tmp_path / "b" / "trms" / "runs.csv",
                "--keep", str(tmp_path / "a" / "trms" / "runs.csv"), str(tmp_path / "b" / "t" / "runs.csv")) == 0
    joined = pd.read_csv(tmp_path / "b" / "trms" / "runs.csv").set_index("run")
    small = pd.read_csv(tmp_path / "b" / "t" / "runs.csv").set_index("run")
    assert list(joined.index) == [f"pretrain-trms-{m}-s{s}-4steps" for s in (0, 1) for m in ("baseline", "deamoe")]
    twin = joined.loc["pretrain-trms-baseline-s1-4steps"]
    assert twin["size"] == "trms" and twin["trained_as"] == "pretrain-t-baseline-s1-4steps"
    pd.testing.assert_series_equal(twin.drop("size"), small.loc["pretrain-t-baseline-s1-4steps"].drop("size"),
                                   check_names=False)
    curves = pd.read_csv(tmp_path / "b" / "trms" / "curves.csv")
    assert set(curves["run"]) == set(joined.index) and set(curves["size"]) == {"trms"}
    # a run in two of the tables: which row stands for it?
    assert join(later, "t", tmp_path / "runs2", tmp_path / "c.csv",
                "--keep", str(tmp_path / "a" / "t" / "runs.csv"), str(tmp_path / "b" / "t" / "runs.csv")) == 2
    assert "give each run's table once" in capsys.readouterr().err


def _pair_and_table(tmp_path: Path, make_config, shards) -> tuple[str, Path]:
    """A config of seeds 0 and 1 (1: extra_seeds), the runs of seed 1 trained, and a table of
    seed 0's pair (a/runs.csv, joined with the config of seed 0 alone)."""
    first = _config(tmp_path / "first", make_config, [])
    _train(first, ["pretrain-t-baseline-s0-4steps", "pretrain-t-deamoe-s0-4steps"], shards, tmp_path / "runs0")
    assert _join(first, tmp_path / "runs0", tmp_path / "a" / "runs.csv") == 0
    later = _config(tmp_path / "later", make_config, [{"steps": 4, "seeds": [1]}])
    _train(later, ["pretrain-t-baseline-s1-4steps", "pretrain-t-deamoe-s1-4steps"], shards, tmp_path / "runs")
    return later, tmp_path / "a" / "runs.csv"


@pytest.mark.parametrize("key, value", [("hidden_size", 64), ("ffn_type", "moe"), ("n_expert", 16),
                                        ("size", "medium")])
def test_pretrain_refuses_a_run_folder_of_another_recipe(tmp_path, make_config, shards, capsys, key, value):
    """A run folder trained with another config of the same steps (another decoder, FFN or size)
    was joined as this config's run: only its planned steps were checked."""
    import json

    config, table = _pair_and_table(tmp_path, make_config, shards)
    summary = tmp_path / "runs" / "pretrain-t-deamoe-s1-4steps" / "summary.json"
    doc = json.loads(summary.read_text())
    summary.write_text(json.dumps({**doc, key: value}))
    capsys.readouterr()
    assert _join(config, tmp_path / "runs", tmp_path / "o" / "runs.csv", "--keep", str(table)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{summary}: {key} is {value!r}, but {config} gives run" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("column, value, shown", [("size", "medium", "'medium'"), ("model", "deamoe", "'deamoe'"),
                                                  ("seed", "7", "7"), ("h", "999", "999"),
                                                  ("planned_steps", "6", "6")])
def test_keep_refuses_a_row_of_another_run(tmp_path, make_config, shards, capsys, column, value, shown):
    """A --keep row whose size, model, seed, shape or planned steps are not its run's in this
    config (a table of another size, length or config; a hand-edited row) stood for the run."""
    config, table = _pair_and_table(tmp_path, make_config, shards)
    kept = pd.read_csv(table, dtype=str, keep_default_na=False)
    kept.loc[0, column] = value
    kept.to_csv(table, index=False)
    capsys.readouterr()
    assert _join(config, tmp_path / "runs", tmp_path / "o" / "runs.csv", "--keep", str(table)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{table}:2: the row of run pretrain-t-baseline-s0-4steps: {column} is {shown}" in err, err
    assert not (tmp_path / "o").exists()
