"""Tiny random-weight checkpoints (both FFN types) with a byte-level BPE tokenizer, for the
serving tests.  Written with save_pretrained exactly as the pre-training stage writes them."""

from __future__ import annotations

import pytest

TEXT = (
    "The department shares most parameters; each expert keeps a few private ones. "
    "Decoding with small batches is bound by loading expert weights from memory. "
) * 20


def make_tokenizer(vocab_size: int = 320):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def make_checkpoint(path, ffn_type: str, seed: int = 0, bias_std: float = 0.0, **overrides):
    import torch

    from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM
    from deamoe.serve.plugin import register_config

    register_config()
    torch.manual_seed(seed)
    tok = make_tokenizer()
    fields = dict(
        vocab_size=384, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256, ffn_type=ffn_type, h_ffn=32,
        n_expert=16 if ffn_type == "deamoe" else 8, k_expert=4, n_dept=4, k_dept=2,
        expert_init="random", eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
        init_std=0.3,  # large enough that routing and the balancing bias change greedy tokens
    )
    fields.update(overrides)
    config = DeaMoEConfig(**fields)
    config.architectures = ["DeaMoEForCausalLM"]
    model = DeaMoEForCausalLM(config).float().eval()
    if bias_std:  # a trained load_balance=bias checkpoint: the bias changes expert selection
        for layer in model.ffn_layers():
            layer.expert_bias.normal_(std=bias_std)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


# DeaMoE like the pipeline's tiny model (head_dim 16: vLLM's CPU attention pads it to 32, tied
# embeddings) with a nonzero balancing bias; the baseline with head_dim 32 and an untied LM head.
VARIANTS = {
    "deamoe": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                   bias_std=0.05),
    "moe": dict(num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False),
}


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {t: make_checkpoint(root / t, t, **VARIANTS[t]) for t in VARIANTS}


@pytest.fixture(scope="session")
def shared_checkpoints(tmp_path_factory):
    """Both checkpoints with always-active shared experts (two, and one of twice the width)."""
    root = tmp_path_factory.mktemp("ckpt_shared")
    shared = {"deamoe": dict(n_shared=2), "moe": dict(n_shared=1, shared_mult=2)}
    return {t: make_checkpoint(root / t, t, **VARIANTS[t], **shared[t]) for t in VARIANTS}
