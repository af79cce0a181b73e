"""Values that make no sense are refused before any work, in one line naming the key or flag:
every number of the config has a range (workflow/schemas/), no NaN or infinity, a key given twice
is an error, sizes that multiply into more memory than the machine has are named, and a held-out
set too short for one batch is an error, never a loss of 0.0."""

from __future__ import annotations

import pytest

from cli_battery import copy_shards, train_config, write_config

BAD_VALUES = [
    ({"train": {"lr": float("inf")}}, "train.lr"),
    ({"train": {"lr": float("nan")}}, "train.lr"),
    ({"train": {"lr": 0.0}}, "train.lr"),
    ({"train": {"lr": 10.0}}, "train.lr"),
    ({"train": {"beta1": 1.0}}, "train.beta1"),
    ({"train": {"beta2": -0.1}}, "train.beta2"),
    ({"train": {"seed": 2 ** 32}}, "train.seed"),
    ({"train": {"seed": -1}}, "train.seed"),
    ({"train": {"steps": 10 ** 20}}, "train.steps"),
    ({"train": {"warmup_steps": 300}}, "train.warmup_steps=300 must be less than the steps of every run"),
    ({"train": {"weight_decay": -0.1}}, "train.weight_decay"),
    ({"train": {"grad_clip": -1.0}}, "train.grad_clip"),
    ({"train": {"checkpoint_every": -5}}, "train.checkpoint_every"),
    ({"train": {"eval_batches": 0}}, "train.eval_batches"),
    ({"train": {"threads": -1}}, "train.threads"),
    ({"train": {"threads": 100000}}, "train.threads"),
    ({"train": {"min_lr_ratio": float("inf")}}, "train.min_lr_ratio"),
    ({"model": {"hidden_size": 10 ** 7}}, "model.hidden_size"),
    ({"model": {"rms_norm_eps": float("nan")}}, "model.rms_norm_eps"),
    ({"model": {"init_std": 50.0}}, "model.init_std"),
    ({"data": {"vocab_size": 10 ** 12}}, "data.vocab_size"),
    ({"ablation": {"seeds": [2 ** 40]}}, "ablation.seeds"),
    ({"pretrain": {"seeds": [0, 0]}}, "pretrain.seeds"),
    ({"pretrain": {"sizes": {"tiny": {"lr": float("inf")}}}}, "pretrain.sizes.tiny.lr"),
    ({"pretrain": {"sizes": {"tiny": {"model": {"aux_loss_coef": -1.0}}}}}, "pretrain.sizes.tiny.model.aux_loss_coef"),
    ({"pretrain": {"sizes": {"tiny": {"steps": 10}}}}, "train.warmup_steps=30 must be less than"),
    ({"eval": {"seed": 2 ** 32}}, "eval.seed"),
    ({"eval": {"batch_size": 10 ** 9}}, "eval.batch_size"),
    ({"serve": {"concurrency": [-1]}}, "serve.concurrency"),
    ({"serve": {"seed": -3}}, "serve.seed"),
    ({"serve": {"tpot_budgets_ms": [0]}}, "serve.tpot_budgets_ms"),
    ({"serve": {"level_timeout_s": float("inf")}}, "serve.level_timeout_s"),
    ({"serve": {"kv_cache_memory_bytes": "0.0G"}}, "serve.kv_cache_memory_bytes='0.0G' leaves vLLM no KV cache"),
    ({"serve": {"kv_cache_memory_bytes": 0}}, "serve.kv_cache_memory_bytes"),
    ({"serve": {"kv_cache_memory_bytes": True}}, "serve.kv_cache_memory_bytes"),
    ({"microbench": {"seed": -1}}, "microbench.seed"),
    ({"microbench": {"roofline_gib": 1.0e9}}, "microbench.roofline_gib"),
    ({"analysis": {"seed": 2 ** 33}}, "analysis.seed"),
    ({"report": {"dpi": 1}}, "report.dpi"),
    # an empty path or name: the working folder (the harness's dataset cache into the checkout)
    ({"eval": {"hf_home": ""}}, "eval.hf_home: '' should be non-empty"),
    ({"eval": {"data_dir": ""}}, "eval.data_dir: '' should be non-empty"),
    ({"data": {"tokenizer": ""}}, "data.tokenizer: '' should be non-empty"),
    ({"data": {"source": "files", "files": ["a.txt", ""]}}, "data.files.1: '' should be non-empty"),
    ({"trian": {"steps": 3}}, "unknown key trian"),
    ({"profile": "huge"}, "profile"),
]


@pytest.mark.parametrize("sections, names", BAD_VALUES, ids=[n for _, n in BAD_VALUES])
def test_a_value_out_of_range_is_named_by_every_command(work, failing, sections, names):
    write_config(work / "c.yaml", **sections)
    failing(["loading", "--config", "c.yaml", "--out", "l.csv"], "c.yaml", names)


@pytest.mark.parametrize("text, names", [
    (b"train:\n  steps: 5\ntrain:\n  lr: 0.1\n", ["c.yaml:3", "'train' is given twice", "line 1"]),
    (b"train:\n  steps: 5\n  steps: 50\n", ["c.yaml:3", "'steps' is given twice"]),
])
def test_a_key_given_twice_is_an_error(work, failing, text, names):
    (work / "c.yaml").write_bytes(text)
    failing(["loading", "--config", "c.yaml", "--out", "l.csv"], *names)


def test_a_key_given_twice_in_a_json_config_is_an_error(work, failing):
    (work / "c.json").write_text('{"train": {"steps": 5}, "train": {"lr": 0.1}}')
    failing(["loading", "--config", "c.json", "--out", "l.csv"], "c.json", "'train' is given twice")


@pytest.mark.parametrize("argv, names", [
    (["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "d", "--out", "r", "--steps",
      str(10 ** 12)], ["--steps", "<= 10000000"]),
    (["loading", "--config", "c.yaml", "--out", "l.csv", "--trials", str(10 ** 9)], ["--trials", "<= 100000"]),
    (["loading", "--config", "c.yaml", "--out", "l.csv", "--tokens", "1,100000"], ["--tokens", "<= 65536"]),
    (["microbench", "--config", "c.yaml", "--out", "mb", "--batches", "4,5000"], ["--batches", "<= 4096"]),
    (["bench", "overread", "o", "--draws", "-3"], ["--draws", ">= 1"]),
    # unbounded, it ran for days; budget's products of 3000-digit sizes failed unexpectedly (exit 1)
    (["bench", "overread", "o", "--draws", str(10 ** 12)], ["--draws", "<= 1000000"]),
    (["budget", "--h", "9" * 3000, "--h-ffn", "9" * 3000, "--n-expert", "8", "--k-expert", "2", "--n-dept", "2",
      "--dea-n-expert", "8", "--k-dept", "1", "--dea-k-expert", "2"], ["--h", "<= 2147483647"]),
    (["bench", "trace", "o", "--batches", "4,x"], ["--batches", "'4,x'"]),
])
@pytest.mark.timeout(120)  # an unbounded flag runs its work instead of failing
def test_a_flag_out_of_range_is_named(work, failing, argv, names):
    write_config(work / "c.yaml")
    failing(argv, *names)


def test_a_product_of_sizes_beyond_the_machine_is_named_before_allocating(work, failing):
    write_config(work / "c.yaml")
    failing(["loading", "--config", "c.yaml", "--out", "l.csv", "--models", "Kimi-K2", "--trials", "100000",
             "--tokens", "65536"], "Figure 2's Monte Carlo", "GiB", "--trials")


TRAIN = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "DATA", "--out", "run"]


def _train(shards, *extra):
    return [str(shards / "data") if a == "DATA" else a for a in TRAIN] + list(extra)


def test_a_model_beyond_the_machines_memory_is_named_before_the_first_step(work, failing, shards):
    import yaml

    doc = yaml.safe_load(train_config(work / "c.yaml", shards).read_text())
    doc["model"].update(hidden_size=16384, num_hidden_layers=48, num_attention_heads=128, num_key_value_heads=8)
    doc["pretrain"]["max_budget_deviation"] = 1.0  # the tiny FFN pair is no longer matched at this width
    (work / "c.yaml").write_text(yaml.safe_dump(doc))
    failing(_train(shards), "run ablation-no1-s0", "parameters", "GiB", "model.hidden_size")


def test_a_held_out_split_without_one_batch_is_an_error_before_training(work, failing, shards):
    import json

    train_config(work / "c.yaml", shards)
    data = copy_shards(shards, work / "d")
    (data / "val.bin").write_bytes((data / "val.bin").read_bytes()[:20])  # 10 tokens < seq_len + 1
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "val_tokens": 10}))
    failing([a if a != "DATA" else "d" for a in TRAIN], "d/val.bin", "10 tokens", "train.seq_len")


def test_a_warm_up_as_long_as_the_overridden_steps_is_named(work, failing, shards):
    train_config(work / "c.yaml", shards)
    failing(_train(shards, "--steps", "2"), "train.warmup_steps=2", "2 steps")


def test_an_empty_corpus_names_its_files(work, failing):
    (work / "corpus").mkdir()
    (work / "corpus" / "a.txt").write_text("\n\n")
    write_config(work / "c.yaml", data={"source": "files", "files": ["corpus/*.txt"]})
    failing(["data", "--config", "c.yaml", "--out", "d"], "corpus is empty", "corpus/a.txt")


def test_a_non_finite_loss_says_what_to_look_at():
    import torch

    from deamoe.errors import DeaMoEError
    from deamoe.train.steplog import StepLog

    for step, names in ((0, ["before any update", "model.init_std"]), (7, ["after 7 updates", "0.003", "train.lr"])):
        log = StepLog("r", torch.device("cpu"), 64, [])
        log.begin()
        log.add(step, 3e-3, torch.tensor([float("nan"), 0.0, 1.0, 1.0, 1.0]))
        with pytest.raises(DeaMoEError) as err:
            log.flush()
        assert all(n in str(err.value) for n in names), err.value


def test_a_held_out_evaluation_of_no_batch_is_an_error_not_zero(shards):
    import dataclasses
    from types import SimpleNamespace

    from deamoe.errors import DeaMoEError
    from deamoe.train.data import TokenData
    from deamoe.settings import load_settings
    from deamoe.train.trainer import evaluate

    s = load_settings(shards / "c.yaml")
    s = dataclasses.replace(s, train=dataclasses.replace(s.train, eval_batches=0))
    model = SimpleNamespace(eval=lambda: None, train=lambda: None)
    with pytest.raises(DeaMoEError, match="yields no held-out batch"):
        evaluate(model, TokenData.open(shards / "data"), s, None, "cpu")


def test_more_cpu_ranks_than_cores_are_named_before_launching(work, failing, shards):
    train_config(work / "c.yaml", shards, nproc_per_node=64, batch_size=128, device="cpu")
    failing(_train(shards), "train.nproc_per_node=64", "cores")
