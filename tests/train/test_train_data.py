import json

import numpy as np
import pytest
import yaml

from deamoe.errors import ConfigError, DataError
from deamoe.train.data import TokenData, prepare
from deamoe.settings import load_settings
from deamoe.train.settings import DataSettings
from deamoe.train.tokenizer import load


def test_shards_round_trip_to_the_text(shards, corpus_dir):
    meta = json.loads((shards / "meta.json").read_text())
    data = TokenData.open(shards)
    assert meta["documents"] == 2 and meta["vocab_size"] <= 300
    assert len(data.train) == meta["train_tokens"] and len(data.val) == meta["val_tokens"]
    # the held-out split is ~2% of every document, the two documents' tails
    assert 0.01 < meta["val_tokens"] / (meta["train_tokens"] + meta["val_tokens"]) < 0.03
    tok = load(shards / "tokenizer")
    eos = tok.eos_token_id
    docs = np.split(np.asarray(data.train), np.flatnonzero(np.asarray(data.train) == eos) + 1)
    first = tok.decode(docs[0].tolist())
    assert (corpus_dir / "corpus" / "a.txt").read_text().startswith(first[:1000])


def test_batches_depend_only_on_seed_and_step(shards):
    data = TokenData.open(shards)
    x, y = data.train_batch(step=3, seed=0, batch_size=4, seq_len=16, rows=slice(0, 4))
    x2, _ = data.train_batch(step=3, seed=0, batch_size=4, seq_len=16, rows=slice(2, 4))
    x3, _ = data.train_batch(step=4, seed=0, batch_size=4, seq_len=16, rows=slice(0, 4))
    assert x.shape == (4, 16) and (x[:, 1:] == y[:, :-1]).all()  # targets are inputs shifted by one
    assert (x[2:] == x2).all()  # a rank's rows are a slice of the one global batch
    assert not (x == x3).all()


def test_non_utf8_and_missing_and_empty_corpus_are_one_line_errors(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"hello \xff\xfe world")
    with pytest.raises(DataError, match=r"bad.txt:1: not UTF-8 text \(byte .* at offset 6 of the file\)"):
        prepare(DataSettings(source="files", files=(str(tmp_path / "bad.txt"),)), tmp_path / "o", progress=False)
    with pytest.raises(DataError, match="matches no file"):
        prepare(DataSettings(source="files", files=(str(tmp_path / "nothing*.txt"),)), tmp_path / "o", progress=False)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="corpus is empty"):
        prepare(DataSettings(source="files", files=(str(tmp_path / "empty.txt"),)), tmp_path / "o", progress=False)
    assert not (tmp_path / "o" / "train.bin").exists()


def test_missing_shards_and_offline_tokenizer_errors(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="missing meta.json"):
        TokenData.open(tmp_path)
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    from deamoe.train.tokenizer import load_named

    with pytest.raises(DataError, match="data.tokenizer='no-such-org/no-such-tokenizer'"):
        load_named("no-such-org/no-such-tokenizer")


def test_config_errors_name_the_key(tmp_path, make_config):
    path = make_config(tmp_path)
    text = open(path).read()
    open(path, "w").write(text.replace("vocab_size: 300", "vocab_size: 300\n  vocab: 1"))
    with pytest.raises(ConfigError, match=r"unknown key data.vocab"):
        load_settings(path)
    with pytest.raises(ConfigError, match=r"train.steps must be an integer"):
        load_settings(doc={"train": {"steps": "ten"}})
    with pytest.raises(ConfigError, match=r"train.batch_size must be a multiple of train.micro_batch_size"):
        load_settings(doc={"train": {"batch_size": 6, "micro_batch_size": 4}})


def test_redpajama_needs_a_byte_budget():
    with pytest.raises(DataError, match="max_bytes > 0"):
        prepare(DataSettings(source="redpajama"), "/nonexistent", progress=False)


def test_whole_documents_held_out_are_never_trained_on(tmp_path, corpus_dir, make_config):
    """val_split=documents: the held-out documents are the ones whose text hashes below
    val_fraction; their tokens are all of val.bin, none of train.bin, and the BPE never saw them
    (a word only they contain gets no token of its own); meta.json names them."""
    from deamoe.train.data import held_out_whole

    base = (corpus_dir / "corpus" / "a.txt").read_text()[:4000]

    def book(i: int, held_out: bool) -> str:  # the first variant of book i that the hash puts on its side
        marker = " zqxjv" * 400 if held_out else ""  # a word only the held-out books contain
        for k in range(100):
            text = f"Book {i}.\n{base[i * 300:]}{marker}\nThe end of book {i}.{' ' * k}\n"
            if held_out_whole(text, 0.3) == held_out:
                return text
        raise AssertionError("no variant found")

    held = [i in (2, 7) for i in range(10)]
    (tmp_path / "corpus").mkdir()
    for i in range(10):
        (tmp_path / "corpus" / f"{i:02d}.txt").write_text(book(i, held[i]))
    cfg = yaml.safe_load(open(make_config(tmp_path)))
    cfg["data"].update(val_split="documents", val_fraction=0.3)
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump(cfg))
    meta = prepare(load_settings(str(path)).data, tmp_path / "data", progress=False)
    assert meta["val_split"] == "documents"
    assert meta["val_documents"] == [f"{i:02d}.txt#0" for i in range(10) if held[i]]
    tok = load(tmp_path / "data" / "tokenizer")
    data = TokenData.open(tmp_path / "data")
    assert "zqxjv" not in tok.decode(np.asarray(data.train).tolist())
    assert tok.decode(np.asarray(data.val).tolist()).count("zqxjv") == 400 * sum(held)
    assert not any("zqxjv" in piece for piece in tok.get_vocab())
    with pytest.raises(ConfigError, match=r"data.val_split must be tail or documents"):
        cfg["data"]["val_split"] = "books"
        path.write_text(yaml.safe_dump(cfg))
        load_settings(str(path))


def test_corpus_fields_count_passes_over_the_training_tokens():
    from deamoe.train.data import corpus_fields

    got = corpus_fields({"train_tokens": 1000, "val_tokens": 10, "train_sha256": "ab" * 32}, 2500)
    assert got == {"corpus_tokens": 1000, "epochs": 2.5, "val_tokens": 10, "val_split": "tail",
                   "data_sha256": "ab" * 8}


def test_a_split_shorter_than_one_window_fails_the_data_step(tmp_path):
    # `--config data={max_bytes: 1000}`: the data step wrote 4 held-out tokens and every training
    # job after it failed; now the data step names it, and writes nothing
    (tmp_path / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    s = DataSettings(source="files", files=(str(tmp_path / "a.txt"),), tokenizer="bpe", vocab_size=300,
                     val_fraction=0.02)
    with pytest.raises(DataError, match=r"^data: the held-out split has \d+ tokens, fewer than the 129 of one "
                       r"window of train.seq_len=128; raise data.max_bytes"):
        prepare(s, tmp_path / "o", progress=False, seq_len=128)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    meta = prepare(s, tmp_path / "o", progress=False, seq_len=4)  # a window fits: written
    assert meta["val_tokens"] >= 5 and (tmp_path / "o" / "meta.json").is_file()
