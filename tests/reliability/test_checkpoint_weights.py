"""A checkpoint whose weights are not the model its config.json describes -- another shape, more
layers than config.json gives, NaN -- is one line naming the checkpoint and the weight, before any
task runs; transformers' own load report (a table of many lines) is not printed."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from cli_battery import REPO, run_cli, tree, write_config


def _weights(ck, change):
    from safetensors.torch import load_file, save_file

    weights = load_file(ck / "model.safetensors")
    change(weights)
    save_file(weights, ck / "model.safetensors", metadata={"format": "pt"})


def _config(ck, **change):
    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, **change}))


def _o_proj(weights):
    return next(k for k in weights if "o_proj" in k)


DAMAGE = {
    # transformers stopped with "For details look at the above report!", its report above
    "a weight of another shape": (lambda ck: _weights(ck, lambda w: w.update({_o_proj(w): w[_o_proj(w)][:3, :3].contiguous()})),
                                  ["another shape than its config.json gives", "o_proj.weight ([3, 3]",
                                   "gives [32, 32]"]),
    "config.json of a smaller vocabulary": (lambda ck: _config(ck, vocab_size=100),
                                            ["another shape", "[300, 32]", "[100, 32]"]),
    # these were evaluated: a one-layer model of the two-layer checkpoint, NaN perplexities
    "config.json of fewer layers": (lambda ck: _config(ck, num_hidden_layers=1),
                                    ["has no place for", "model.layers.1."]),
    "a weight of NaN": (lambda ck: _weights(ck, lambda w: w[_o_proj(w)].fill_(float("nan"))),
                        ["o_proj.weight holds NaN or infinite values"]),
    # transformers cast it to the float dtype without a word: evaluated as a model
    "a weight of integers": (lambda ck: _weights(ck, lambda w: w.update({_o_proj(w): w[_o_proj(w)].to(torch.int64)})),
                             ["o_proj.weight is stored as I64 in model.safetensors, not floating point"]),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_weights_of_another_model_are_named_in_one_line(work, capsys, checkpoint, kind):
    shutil.copytree(checkpoint, work / "ck")
    damage, names = DAMAGE[kind]
    damage(work / "ck")
    write_config(work / "c.yaml", eval={"tasks": ["ptb"], "limit": 1, "data_dir": str(REPO / "data" / "eval")})
    before = tree(work)
    status, err = run_cli(["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e"],
                          capsys)
    # transformers' progress bar may precede the one line of the error; its load report may not
    assert status == 2 and "Traceback" not in err and "LOAD REPORT" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ck: ") and all(n in last for n in names), last
    assert tree(work) == before


def test_a_checkpoint_context_shorter_than_the_serving_length_is_named_before_the_server_starts(
        work, failing, checkpoint, monkeypatch):
    """vLLM started, refused serve.max_model_len in its start-up and died; the command printed the
    tail of its log, a Python traceback among it, and blamed the server."""
    from deamoe.serve import bench

    def started(*args, **kwargs):
        raise AssertionError("the server was started")

    monkeypatch.setattr(bench, "VllmServer", started)
    shutil.copytree(checkpoint, work / "ck")
    _config(work / "ck", max_position_embeddings=16)
    write_config(work / "c.yaml", serve={"input_len": 8, "output_len": 4})
    failing(["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv"],
            "ck/config.json: max_position_embeddings=16 is less than the 28 tokens", "serve.max_model_len")
