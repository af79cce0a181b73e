"""Shared fixtures: a small corpus, its shards, and a config for a very small model."""

from __future__ import annotations

import gzip

import pytest
import yaml

from deamoe.train.data import BUNDLED, DOC_SEPARATOR


def small_config(tmp_path, **train) -> str:
    doc = {
        "profile": "tiny",
        "data": {"source": "files", "files": [str(tmp_path / "corpus" / "*.txt")], "vocab_size": 300},
        "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                  "num_key_value_heads": 1, "max_position_embeddings": 32},
        "train": {"seq_len": 16, "batch_size": 4, "micro_batch_size": 2, "steps": 6,
                  "warmup_steps": 2, "checkpoint_every": 0, "eval_batches": 2, "threads": 1, **train},
        "ablation": {"h_ffn": 16, "n_dept": 4, "n_expert": 8, "k_dept": 2, "k_expert": 3, "last_n": 3},
        "pretrain": {"sizes": {"t": {"baseline": {"h_ffn": 16, "n_expert": 8, "k_expert": 4},
                                     "deamoe": {"h_ffn": 16, "n_dept": 4, "n_expert": 8, "k_dept": 2,
                                                "k_expert": 4}}},
                     "seeds": [0], "max_budget_deviation": 0.05},
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def make_config():
    """small_config(tmp_path, **train_overrides) -> path of a config for a very small model."""
    return small_config


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    """Two small documents cut from the bundled corpus (about 60 kB)."""
    root = tmp_path_factory.mktemp("train")
    books = gzip.decompress(BUNDLED.read_bytes()).decode().split(DOC_SEPARATOR)
    (root / "corpus").mkdir()
    (root / "corpus" / "a.txt").write_text(books[0][:30000])
    (root / "corpus" / "b.txt").write_text(books[3][:30000])
    return root


@pytest.fixture(scope="session")
def shards(corpus_dir):
    """Token shards of the small corpus (written once per session)."""
    from deamoe.train.data import prepare
    from deamoe.settings import load_settings

    s = load_settings(small_config(corpus_dir))
    prepare(s.data, corpus_dir / "data", progress=False)
    return corpus_dir / "data"
