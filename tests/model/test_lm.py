import pytest
import torch
from transformers import AutoModelForCausalLM

from deamoe.errors import ConfigError
from deamoe.model import DeaMoEConfig, DeaMoEForCausalLM


def tiny(ffn_type, **kw):
    cfg = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, ffn_type=ffn_type, h_ffn=16, n_expert=8, k_expert=2,
               n_dept=4, k_dept=2)
    cfg.update(kw)
    torch.manual_seed(0)
    return DeaMoEForCausalLM(DeaMoEConfig(**cfg))


@pytest.mark.parametrize("ffn_type", ["moe", "deamoe"])
def test_save_load_roundtrip_and_cached_generation(tmp_path, ffn_type):
    model = tiny(ffn_type).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 64, (2, 12))
    torch.testing.assert_close(model(ids).logits, again(ids).logits)
    out = model.generate(ids[:1, :4], max_new_tokens=8, do_sample=False)
    x = ids[:1, :4]
    for _ in range(8):  # greedy without the KV cache
        x = torch.cat([x, model(x).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, x)


def test_padding_mask_leaves_real_tokens_unchanged():
    model = tiny("deamoe").eval()
    ids = torch.randint(0, 64, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 7), torch.zeros(1, 3)], 1).long()
    torch.testing.assert_close(model(ids).logits, model(padded, attention_mask=mask).logits[:, :7])


def test_training_loss_includes_aux_loss_and_stats():
    model = tiny("deamoe", aux_loss_coef=1.0).train()
    ids = torch.randint(0, 64, (2, 16))
    loss = model(ids, labels=ids).loss
    model.eval()
    ce = model(ids, labels=ids).loss
    assert loss.item() > ce.item()
    stats = model.routing_stats()
    assert 1.0 <= stats["mean_distinct_departments"] <= 2.0


def test_bad_config_is_one_line_error():
    with pytest.raises(ConfigError, match="k_dept"):
        DeaMoEConfig(ffn_type="deamoe", n_dept=4, k_dept=5)
    with pytest.raises(ConfigError, match="ffn_type"):
        DeaMoEConfig(ffn_type="dense")


@pytest.mark.parametrize("ffn_type", ["moe", "deamoe"])
def test_expert_init_scale_scales_the_routed_matrices_only(ffn_type):
    """1.0 is bit-for-bit the model without the field; 2.0 doubles exactly the routed experts' std
    (DeaMoE: its department matrices; the identity expert factors stay the identity)."""
    ref, one, two = tiny(ffn_type).state_dict(), tiny(ffn_type, expert_init_scale=1.0).state_dict(), \
        tiny(ffn_type, expert_init_scale=2.0).state_dict()
    scaled = ("gate_proj", "up_proj", "down_proj") if ffn_type == "moe" else ("dept_gate", "dept_up", "dept_down")
    for name, w in ref.items():
        assert torch.equal(one[name], w), name
        routed = name.rsplit(".", 1)[-1] in scaled and ".mlp." in name and "shared" not in name
        if routed:
            torch.testing.assert_close(two[name], 2 * w, rtol=0, atol=0)
        else:
            assert torch.equal(two[name], w), name
    assert any(name.endswith(scaled[0]) for name in ref)
