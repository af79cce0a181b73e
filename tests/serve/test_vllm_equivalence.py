"""vLLM greedy decoding equals the Hugging Face model's greedy decoding, token for token (CPU, fp32).

Both FFN types; offline engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, eager), which
is vLLM's fast path (~10 s per model).  The plugin registers the architecture the same way the
API server's entry point does.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm")

PROMPTS = [[5, 17, 42, 99, 7], [100, 3, 250, 8, 9, 11, 12], [300], list(range(40, 80))]
NEW_TOKENS = 24


def hf_greedy(checkpoint, prompts, n):
    import torch
    from transformers import AutoModelForCausalLM

    from deamoe.serve.plugin import register_config

    register_config()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = model.generate(
                torch.tensor([p]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
            )
            outs.append(ids[0, len(p):].tolist())
    return outs


def vllm_greedy(checkpoint, prompts, n):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    from deamoe.serve.plugin import register

    register()
    llm = LLM(
        model=str(checkpoint), dtype="float32", enforce_eager=True, seed=0,
        kv_cache_memory_bytes=1 << 28, max_model_len=128, skip_tokenizer_init=True,
    )
    try:
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]
    finally:
        del llm
        import gc

        gc.collect()


@pytest.mark.slow
@pytest.mark.parametrize("ffn_type", ["deamoe", "moe"])
def test_vllm_greedy_equals_hf_greedy(tiny_checkpoints, ffn_type):
    ckpt = tiny_checkpoints[ffn_type]
    expected = hf_greedy(ckpt, PROMPTS, NEW_TOKENS)
    got = vllm_greedy(ckpt, PROMPTS, NEW_TOKENS)
    assert got == expected


@pytest.mark.parametrize("ffn_type", ["deamoe", "moe"])
def test_greedy_tokens_depend_on_routing(tiny_checkpoints, ffn_type, tmp_path):
    """Guards the test above: in these checkpoints, other experts (and for DeaMoE, no balancing
    bias) give other greedy tokens, so a serving-side routing or FFN error cannot pass."""
    from transformers import AutoModelForCausalLM

    ckpt = tiny_checkpoints[ffn_type]
    expected = hf_greedy(ckpt, PROMPTS, NEW_TOKENS)
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    for layer in model.ffn_layers():
        layer.router.weight.data = layer.router.weight.data.flip(0)
    model.save_pretrained(tmp_path / "flipped")
    assert hf_greedy(tmp_path / "flipped", PROMPTS, NEW_TOKENS) != expected
    if ffn_type == "deamoe":
        model = AutoModelForCausalLM.from_pretrained(ckpt)
        for layer in model.ffn_layers():
            layer.expert_bias.zero_()
        model.save_pretrained(tmp_path / "unbiased")
        assert hf_greedy(tmp_path / "unbiased", PROMPTS, NEW_TOKENS) != expected


@pytest.mark.slow
@pytest.mark.parametrize("ffn_type", ["deamoe", "moe"])
def test_vllm_serves_shared_expert_checkpoints(shared_checkpoints, ffn_type, tmp_path):
    """Checkpoints with shared experts (mlp.shared_experts.*) load into vLLM and decode exactly as
    the Hugging Face model; without their shared experts the greedy tokens differ."""
    from safetensors.torch import load_file, save_file

    ckpt = shared_checkpoints[ffn_type]
    tensors = load_file(ckpt / "model.safetensors")
    assert any(".mlp.shared_experts.down_proj.weight" in k for k in tensors)
    expected = hf_greedy(ckpt, PROMPTS, NEW_TOKENS)
    assert vllm_greedy(ckpt, PROMPTS, NEW_TOKENS) == expected
    import shutil

    shutil.copytree(ckpt, tmp_path / "no_shared")
    save_file({k: v.zero_() if "shared_experts.down_proj" in k else v for k, v in tensors.items()},
              tmp_path / "no_shared" / "model.safetensors", metadata={"format": "pt"})
    assert hf_greedy(tmp_path / "no_shared", PROMPTS, NEW_TOKENS) != expected
