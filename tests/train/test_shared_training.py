"""Training with shared experts: the LM config takes n_shared; balancing stays on routed experts."""

from __future__ import annotations

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from deamoe.analysis.budget import ffn_params
from deamoe.errors import ConfigError
from deamoe.model import DeaMoEConfig, DeaMoEForCausalLM
from deamoe.train.runs import model_config, run_spec, size
from deamoe.settings import load_settings
from deamoe.train.trainer import train_run


def _with_shared(path, baseline=1, deamoe=1):
    doc = yaml.safe_load(open(path))
    doc["pretrain"]["sizes"]["t"]["baseline"]["n_shared"] = baseline
    doc["pretrain"]["sizes"]["t"]["deamoe"]["n_shared"] = deamoe
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


@pytest.mark.parametrize("ffn_type", ["moe", "deamoe"])
def test_lm_with_shared_experts_balances_routed_experts_only(ffn_type):
    cfg = DeaMoEConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       ffn_type=ffn_type, h_ffn=16, n_expert=8, k_expert=2, n_dept=4, k_dept=2,
                       n_shared=2, load_balance="bias")
    torch.manual_seed(0)
    model = DeaMoEForCausalLM(cfg).train()
    for layer in model.ffn_layers():
        assert layer.shape.n_shared == 2 and layer.shared_experts is not None
        assert sum(p.numel() for p in layer.parameters()) == ffn_params(layer.shape)
    ids = torch.randint(0, 64, (2, 16))
    model(ids, labels=ids).loss.backward()
    for layer in model.ffn_layers():
        assert layer.last_logits.shape[-1] == 8  # no router column for the shared experts
        assert layer.shared_experts.gate_proj.weight.grad is not None
    assert torch.isfinite(model.aux_loss())
    model.update_balance_bias()
    assert all(layer.expert_bias.shape == (8,) for layer in model.ffn_layers())
    assert model.routing_stats()["max_load_over_mean"] >= 1.0


def test_pretrain_pair_with_shared_experts_trains_and_reloads(tmp_path, make_config, shards):
    s = load_settings(_with_shared(make_config(tmp_path, steps=2, warmup_steps=1)))
    z = size(s, "t")
    assert z.baseline.n_shared == z.deamoe.n_shared == 1
    for name in ("pretrain-t-baseline-s0", "pretrain-t-deamoe-s0"):
        spec = run_spec(s, name)
        assert model_config(s, spec, 300).n_shared == 1
        out = tmp_path / "runs" / name
        train_run(s, spec, shards, out, progress=False)
        model = AutoModelForCausalLM.from_pretrained(out / "checkpoint")
        assert model.config.n_shared == 1
        assert all(layer.shared_experts is not None for layer in model.ffn_layers())


def test_pretrain_pair_with_different_shared_experts_is_refused(tmp_path, make_config):
    path = _with_shared(make_config(tmp_path), baseline=1, deamoe=0)
    with pytest.raises(ConfigError, match="n_shared"):
        size(load_settings(path), "t")



def test_budget_search_gives_deamoe_the_baselines_shared_experts():
    from deamoe.analysis.budget import budget, search
    from deamoe.shapes import TABLE1

    base = TABLE1["Baseline-7B"].baseline.replace(n_shared=1)
    found = search(base)
    assert found and all(c["shape"].n_shared == 1 for c in found)
    b = budget(base, found[0]["shape"])
    assert abs(b["params_ratio"] - 1) <= 0.02 and abs(b["flops_ratio"] - 1) <= 0.02
