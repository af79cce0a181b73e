"""Tiny randomly initialised checkpoints (DeaMoE and a plain Llama) with a BPE tokenizer trained here."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "data" / "eval"


def tiny_tokenizer():
    from deamoe.train.tokenizer import train_bpe

    with gzip.open(DATA_DIR / "wikitext-2-raw_test.txt.gz", "rt") as f:
        text = f.read(20000)
    with gzip.open(DATA_DIR / "ptb_test.txt.gz", "rt") as f:
        text += f.read(5000)
    return train_bpe(text.split("\n"), vocab_size=400)


def make_checkpoint(path: Path, kind: str = "deamoe") -> Path:
    import torch

    torch.manual_seed(0)
    tok = tiny_tokenizer()
    if kind == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
        model = LlamaForCausalLM(cfg)
    else:
        from deamoe.model import DeaMoEConfig, DeaMoEForCausalLM

        cfg = DeaMoEConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, max_position_embeddings=256, h_ffn=16, n_expert=8,
                           k_expert=2, n_dept=4, k_dept=2, ffn_type=kind,
                           eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
        model = DeaMoEForCausalLM(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "deamoe", "deamoe")
