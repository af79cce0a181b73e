"""A truncated, foreign or hand-edited file that a stage reads is one line naming the file and
where (line, key or byte), never a traceback; nothing is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deamoe.io import write_json

from cli_battery import REPO, RUNS, copy_shards, finished_runs, run_cli, train_config, tree, write_config

TRAIN = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "d", "--out", "run"]


def _meta(path, **change):
    meta = json.loads(path.read_text())
    meta.update(change)
    for key in [k for k, v in change.items() if v is None]:
        del meta[key]
    path.write_text(json.dumps(meta))


SHARD_DAMAGE = {
    "train.bin of odd length": (lambda d: d.joinpath("train.bin").write_bytes(d.joinpath("train.bin").read_bytes()[:-1]),
                                ["d/train.bin", "not a whole number of uint16 tokens"]),
    "val.bin shorter than meta.json says": (lambda d: d.joinpath("val.bin").write_bytes(d.joinpath("val.bin").read_bytes()[:-20]),
                                            ["d/val.bin", "meta.json says"]),
    "a token id beyond the vocabulary": (lambda d: d.joinpath("train.bin").write_bytes(
        np.full(len(np.fromfile(d / "train.bin", np.uint16)), 5000, np.uint16).tobytes()),
        ["d/train.bin", "token id 5000", "vocab_size 300"]),
    "meta.json truncated": (lambda d: d.joinpath("meta.json").write_text(d.joinpath("meta.json").read_text()[:40]),
                            ["d/meta.json", "not valid JSON"]),
    "meta.json a list": (lambda d: d.joinpath("meta.json").write_text("[1, 2]"), ["d/meta.json", "JSON list"]),
    "meta.json empty": (lambda d: d.joinpath("meta.json").write_text(""), ["d/meta.json", "empty file"]),
    "meta.json not UTF-8": (lambda d: d.joinpath("meta.json").write_bytes(b'{"dtype": "\xff"}'),
                            ["d/meta.json", "not UTF-8", "offset 11"]),
    "meta.json dtype unknown": (lambda d: _meta(d / "meta.json", dtype="float64"), ["d/meta.json", "'dtype'"]),
    "meta.json vocab_size a string": (lambda d: _meta(d / "meta.json", vocab_size="300"),
                                      ["d/meta.json", "'vocab_size'", "integer"]),
    "meta.json without train_tokens": (lambda d: _meta(d / "meta.json", train_tokens=None),
                                       ["d/meta.json", "missing key 'train_tokens'"]),
}


@pytest.mark.parametrize("kind", list(SHARD_DAMAGE))
def test_damaged_token_shards(work, failing, shards, kind):
    train_config(work / "c.yaml", shards)
    damage, names = SHARD_DAMAGE[kind]
    damage(copy_shards(shards, work / "d"))
    failing(TRAIN, *names)


# --- what the summaries read: each run's summary.json and log.csv, lm_eval.json ------------------

RUN = "runs/pretrain-t-deamoe-s0"
RUN_DAMAGE = {
    "summary truncated": ("summary.json", lambda t: t[:30], ["summary.json", "not valid JSON"]),
    "summary a list": ("summary.json", lambda t: "[]", ["summary.json", "JSON list"]),
    "summary without val_loss": ("summary.json", lambda t: t.replace('"val_loss"', '"loss"'),
                                 ["summary.json", "missing key 'val_loss'"]),
    "summary val_loss text": ("summary.json", lambda t: t.replace("5.0,", '"NaN",', 1),
                              ["summary.json", "'val_loss' must be a number"]),
    "summary params negative": ("summary.json", lambda t: t.replace("1000", "-5"), ["summary.json", "'params'"]),
    "log empty": ("log.csv", lambda t: "", ["log.csv", "empty file"]),
    "log without loss": ("log.csv", lambda t: t.replace(",loss,", ",lss,"), ["log.csv", "missing column(s) loss"]),
    "log not UTF-8": ("log.csv", lambda t: t.replace("5.5", "5\udcff5"), ["log.csv:3", "not UTF-8"]),
    "log loss NaN": ("log.csv", lambda t: t.replace("5.5", "nan"), ["log.csv:3", "loss is empty or NaN"]),
    "log loss text": ("log.csv", lambda t: t.replace("5.5", "low"), ["log.csv:3", "loss is 'low'"]),
    "log steps out of order": ("log.csv", lambda t: t.replace("3,192", "1,192"), ["log.csv:4", "step 1"]),
    "log step negative": ("log.csv", lambda t: t.replace("1,64", "-1,64"), ["log.csv:2", "step is -1, not a number > 0"]),
    "log tokens true": ("log.csv", lambda t: t.replace("64,", "True,").replace("128,", "True,").replace("192,", "True,"),
                        ["log.csv:2", "column tokens is 'True', not a number"]),
    "log header only": ("log.csv", lambda t: t.splitlines()[0] + "\n", ["log.csv", "no rows"]),
    "summary of another run": ("summary.json", lambda t: t.replace(RUNS[1], RUNS[0]),
                               ["summary.json", "key 'run' is 'pretrain-t-baseline-s0'"]),
}


@pytest.mark.parametrize("kind", list(RUN_DAMAGE))
def test_damaged_run_results(work, failing, shards, kind):
    train_config(work / "c.yaml", shards)
    finished_runs(work)
    name, damage, names = RUN_DAMAGE[kind]
    path = work / RUN / name
    path.write_bytes(damage(path.read_text()).encode("utf-8", "surrogateescape"))
    failing(["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"], RUN, *names)


KEPT_DAMAGE = {  # the earlier summary given with --keep, and the curves.csv beside it
    "a kept val_loss NaN": ("runs.csv", lambda t: ",3,nan,".join(t.rsplit(",3,5.0,", 1)), ["q/runs.csv:3", "val_loss"]),
    "a kept loss NaN": ("curves.csv", lambda t: t.replace(",5.5,", ",nan,", 1), ["q/curves.csv:3", "loss"]),
    "the kept curves truncated": ("curves.csv", lambda t: t[:t.rindex("\n3,")], ["q/curves.csv", "ends at step 2"]),
    # its curve drew back on itself in the report
    "a kept curve row given twice": ("curves.csv", lambda t: t + t.splitlines()[2] + "\n",
                                     ["q/curves.csv:8", "step=2", "is given twice", "q/curves.csv:3"]),
}


@pytest.mark.parametrize("kind", list(KEPT_DAMAGE))
def test_damaged_kept_summary(work, failing, shards, capsys, kind):
    train_config(work / "c.yaml", shards)
    finished_runs(work)
    assert run_cli(["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "q/runs.csv"], capsys)[0] == 0
    (work / RUN / "summary.json").unlink()  # the kept row stands for this run
    name, damage, names = KEPT_DAMAGE[kind]
    (work / "q" / name).write_text(damage((work / "q" / name).read_text()))
    failing(["pretrain", "--config", "c.yaml", "--runs", "runs", "--keep", "q/runs.csv", "--out", "r/runs.csv"],
            *names)


LM_EVAL_DAMAGE = {
    "not JSON": ("{results:", ["not valid JSON"]),
    "results a list": ('{"results": []}', ["'results' must be an object"]),
    "accuracy as text": ('{"results": {"boolq": {"acc,none": "high"}}}', ["results.boolq", "'acc,none'"]),
    "task result not an object": ('{"results": {"boolq": 3}}', ["results.boolq must be an object"]),
    "n-samples entry not an object": ('{"results": {}, "n-samples": {"boolq": 5}}', ["n-samples.boolq"]),
    "word count negative": ('{"results": {}, "deamoe": {"corpora": {"ptb": {"words": -3}}}}',
                            ["deamoe.corpora.ptb", "'words'"]),
    "perplexity infinite": ('{"results": {"ptb": {"word_perplexity,none": Infinity}}}',
                            ["'word_perplexity,none'", "not a finite number"]),
}


@pytest.mark.parametrize("kind", list(LM_EVAL_DAMAGE))
@pytest.mark.parametrize("command", ["eval-tables", "pretrain"])
def test_damaged_lm_eval_result(work, failing, shards, kind, command):
    train_config(work / "c.yaml", shards)
    finished_runs(work)
    text, names = LM_EVAL_DAMAGE[kind]
    (work / "ev" / RUNS[1] / "lm_eval.json").write_text(text)
    argv = (["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"] if command == "eval-tables" else
            ["pretrain", "--config", "c.yaml", "--runs", "runs", "--eval", "ev", "--out", "q/runs.csv"])
    failing(argv, f"ev/{RUNS[1]}/lm_eval.json", *names)


def test_evaluations_of_runs_the_config_no_longer_trains_are_left_out_of_the_tables(work, shards, capsys):
    """results/eval keeps the evaluation of a seed (or size) an earlier config trained: after the
    config is edited, eval-tables (rerun by the workflow) shows this config's runs only -- the stale
    one would stand beside them, and first, in Tables 2 and 3."""
    import pandas as pd

    train_config(work / "c.yaml", shards)
    finished_runs(work)
    for stale in ("pretrain-t-deamoe-s7", "pretrain-old-deamoe-s0"):
        write_json(work / "ev" / stale / "lm_eval.json", {"results": {"ptb": {"word_perplexity,none": 1.0}}})
    assert run_cli(["eval-tables", "--config", "c.yaml", "--in", "ev", "--out", "et"], capsys)[0] == 0
    assert sorted(pd.read_csv(work / "et" / "perplexity.csv")["run"]) == sorted(RUNS)


LEVEL = {"model": "deamoe", "concurrency": 1, "tpot_mean_ms": 2.0, "tpot_median_ms": 2.0, "tpot_p99_ms": 3.0,
         "ttft_ms": 9.0, "output_tok_s": 100.0, "backend": "vllm", "device": "cpu",
         "tpot_server_mean_ms": 2.0}
SERVE_DAMAGE = {
    "truncated": (lambda: json.dumps(LEVEL)[:50], ["not valid JSON"]),
    "TPOT as text": (lambda: json.dumps({**LEVEL, "tpot_mean_ms": "fast"}), ["'tpot_mean_ms' must be a number"]),
    "concurrency 0": (lambda: json.dumps({**LEVEL, "concurrency": 0}), ["'concurrency'", ">= 1"]),
    "no model": (lambda: json.dumps({k: v for k, v in LEVEL.items() if k != "model"}), ["missing key 'model'"]),
    "no server TPOT for serve.slo_metric": (lambda: json.dumps({**LEVEL, "tpot_server_mean_ms": None}),
                                            ["'tpot_server_mean_ms'"]),
    "negative TTFT": (lambda: json.dumps({**LEVEL, "ttft_ms": -1}), ["'ttft_ms'"]),
    # the speedup divides by it: it was an infinite speedup in tpot.csv
    "TPOT 0 on serve.slo_metric": (lambda: json.dumps({**LEVEL, "tpot_server_mean_ms": 0}),
                                   ["'tpot_server_mean_ms' is 0", "no time per output token"]),
    "another level's": (lambda: json.dumps({**LEVEL, "concurrency": 2}), ["'concurrency' is 2", "(1)"]),
    "the baseline's level": (lambda: json.dumps({**LEVEL, "model": "baseline"}),
                             ["key 'model' is 'baseline'", "(deamoe)"]),
}


@pytest.mark.parametrize("kind", list(SERVE_DAMAGE))
def test_damaged_serving_result(work, failing, kind):
    write_config(work / "c.yaml", serve={"slo_metric": "tpot_server_mean_ms"})
    for model in ("baseline", "deamoe"):
        (work / "sv" / model).mkdir(parents=True)
        (work / "sv" / model / "c1.json").write_text(json.dumps({**LEVEL, "model": model}))
    text, names = SERVE_DAMAGE[kind]
    (work / "sv" / "deamoe" / "c1.json").write_text(text())
    failing(["serve-tables", "--config", "c.yaml", "--in", "sv", "--out", "st"], "sv/deamoe/c1.json", *names)


@pytest.mark.parametrize("copy", ["baseline.bak", "0-old"])  # sorted after and before the model's own
def test_a_copy_of_a_models_serving_results_beside_it_is_not_read_twice(work, capsys, copy):
    """A user's backup of results/serve/baseline under another name: serve-tables (the workflow's
    serve_tables) reads the model's own folder, not both (it stopped on a pandas error)."""
    import pandas as pd

    write_config(work / "c.yaml", serve={"slo_metric": "tpot_server_mean_ms"})
    for folder, model, tpot in (("baseline", "baseline", 2.0), ("deamoe", "deamoe", 1.0), (copy, "baseline", 9.0)):
        (work / "sv" / folder).mkdir(parents=True)
        (work / "sv" / folder / "c1.json").write_text(json.dumps({**LEVEL, "model": model, "tpot_mean_ms": tpot}))
    status, err = run_cli(["serve-tables", "--config", "c.yaml", "--in", "sv", "--out", "st"], capsys)
    assert status == 0, err
    tpot = pd.read_csv(work / "st" / "tpot.csv")
    assert sorted(zip(tpot.model, tpot.tpot_mean_ms)) == [("baseline", 2.0), ("deamoe", 1.0)]


# --- what the report reads -------------------------------------------------------------------

REPORT_DAMAGE = {
    "an empty table": ("res/analysis/table1.csv", "", ["table1.csv", "empty file"]),
    "an infinite ratio": ("res/analysis/loading.csv", "model,tokens,ratio\nDeepSeek-V3,1,inf\n",
                          ["loading.csv:2", "ratio is inf"]),
    # Figure 2 drew both rows of a point, and a step of no tokens
    "a loading point twice": ("res/analysis/loading.csv", "model,tokens,ratio\nDeepSeek-V3,4,0.6\nDeepSeek-V3,4,0.7\n",
                              ["loading.csv:3", "DeepSeek-V3", "4"]),
    "loading at no tokens": ("res/analysis/loading.csv", "model,tokens,ratio\nDeepSeek-V3,0,1.0\n",
                             ["loading.csv:2", "tokens is 0", "> 0"]),
    "a committed time missing": ("meas/h200/microbench.csv",
                                 "model,batch,baseline_us,deamoe_us\nDeepSeek-V3,4,,3.0\n",
                                 ["microbench.csv:2", "baseline_us is empty or NaN"]),
    # a time of 0 passes as finite; the panels divide by it
    "a committed time of zero": ("meas/h200/microbench_fp8.csv",
                                 "model,batch,weight_dtype,baseline_us,deamoe_us\nDeepSeek-V3,4,fp8,3.0,0\n",
                                 ["microbench_fp8.csv:2", "deamoe_us is 0", "> 0"]),
    "a column missing": ("res/microbench/decode_tpot.csv", "model,batch\nBaseline-7B,4\n",
                         ["decode_tpot.csv", "missing column(s) baseline_tpot_ms"]),
    "a run summary that is a list": ("res/train/pretrain-tiny-deamoe-s0/summary.json", "[]",
                                     ["summary.json", "JSON list"]),
    "a resolved config not YAML": ("res/config/resolved-0123456789abcdef.yaml", "a: [", ["resolved-0123456789abcdef.yaml"]),
}


@pytest.mark.parametrize("kind", list(REPORT_DAMAGE))
def test_damaged_report_input(work, failing, kind):
    (work / "c.yaml").write_text("report: {dpi: 60}\n")  # no profile: the report reads the resolved config's
    (work / "meas" / "h200").mkdir(parents=True)
    (work / "res").mkdir()
    where, text, names = REPORT_DAMAGE[kind]
    (work / where).parent.mkdir(parents=True, exist_ok=True)
    (work / where).write_text(text)
    failing(["report", "--config", "c.yaml", "--results", "res", "--measured", "meas", "--out", "rep"], *names)


def test_a_checkpoint_lacking_weights_is_not_evaluated(work, capsys, checkpoint):
    import shutil

    from safetensors.torch import load_file, save_file

    ck = work / "ck"
    shutil.copytree(checkpoint, ck)
    weights = load_file(ck / "model.safetensors")
    save_file({k: v for k, v in weights.items() if ".1." not in k}, ck / "model.safetensors", metadata={"format": "pt"})
    write_config(work / "c.yaml", eval={"tasks": ["ptb"], "limit": 1,  # its data, read first
                                        "data_dir": str(REPO / "data" / "eval")})
    before = tree(work)
    status, err = run_cli(["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e"],
                          capsys)
    # transformers' own progress bar may precede the one line of the error
    assert status == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ck: the checkpoint lacks") and "layers.1." in last, last
    assert tree(work) == before


def test_an_unexpected_error_is_one_line_and_traceback_shows_it(work, capsys, monkeypatch):
    import deamoe.analysis.table1 as table1

    def broken(models):
        raise KeyError("x")

    monkeypatch.setattr(table1, "table1", broken)
    status, err = run_cli(["table1", "--models", "Baseline-7B", "--out", "t.csv"], capsys)
    assert status == 1 and len(err.strip().splitlines()) == 1 and "KeyError" in err and "--traceback" in err
    with pytest.raises(KeyError):
        run_cli(["--traceback", "table1", "--models", "Baseline-7B", "--out", "t.csv"], capsys)
    with pytest.raises(KeyError):  # where users add it: after the command
        run_cli(["table1", "--models", "Baseline-7B", "--out", "t.csv", "--traceback"], capsys)
