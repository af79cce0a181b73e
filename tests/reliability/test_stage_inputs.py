"""What `train` reads beside the token shards: the tokenizer the shards came with (loadable, of
the shards' vocabulary) and the run's name, written only as the plan writes it."""

from __future__ import annotations

import json
import shutil

import pytest

from cli_battery import train_config

TRAIN = ["train", "--config", "c.yaml", "--run", "pretrain-t-deamoe-s0", "--data", "d", "--out"]


def _shards_with_own_tokenizer(shards, to):
    shutil.copytree(shards / "data", to)
    return to


@pytest.mark.parametrize("damage, names", [
    (lambda d: (d / "tokenizer" / "tokenizer.json").write_text("{bad"),
     ["d/tokenizer", "the tokenizer cannot be loaded", "JSONDecodeError"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({**json.loads((d / "meta.json").read_text()),
                                                         "vocab_size": 5000})),
     ["d/tokenizer holds 300 tokens", "vocab_size 5000"]),
], ids=["tokenizer.json damaged", "another vocabulary than meta.json's"])
def test_a_tokenizer_that_is_not_the_shards_is_one_line(work, failing, shards, damage, names):
    train_config(work / "c.yaml", shards)
    damage(_shards_with_own_tokenizer(shards, work / "d"))
    failing([*TRAIN, "run"], *names)


@pytest.mark.parametrize("run, canonical", [
    ("pretrain-t-deamoe-s0-0steps", "pretrain-t-deamoe-s0"), ("pretrain-t-baseline-s00", "pretrain-t-baseline-s0"),
    ("ablation-no1-s01", "ablation-no1-s1"),
])
def test_a_run_is_trained_only_under_the_name_the_plan_gives_it(work, failing, shards, run, canonical):
    train_config(work / "c.yaml", shards)
    failing(["train", "--config", "c.yaml", "--run", run, "--data", str(shards / "data"), "--out", "r"],
            f"run {run}: write it {canonical}")
