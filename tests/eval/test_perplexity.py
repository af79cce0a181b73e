"""The pipeline's word perplexity (runner + lm-eval + task YAMLs) against a direct computation:
the sum of token NLLs of the scored text, read in windows of eval.max_length tokens, divided by
the corpus's word count."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest
import torch

from deamoe.errors import ConfigError
from deamoe.eval import corpus, runner
from deamoe.eval.settings import EvalSettings
from deamoe.eval.tables import perplexity_rows

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "eval"
MAX_CHARS = 3000
WINDOW = 64


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A random DeaMoE whose predictions depend on the context (large init), 256-token context."""
    from deamoe.model import DeaMoEConfig, DeaMoEForCausalLM
    from deamoe.train.tokenizer import train_bpe

    with gzip.open(DATA_DIR / "wikitext-2-raw_test.txt.gz", "rt") as f:
        text = f.read(20000)
    tok = train_bpe(text.split("\n"), vocab_size=400)
    torch.manual_seed(0)
    cfg = DeaMoEConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=256, h_ffn=16, n_expert=8,
                       k_expert=2, n_dept=4, k_dept=2, init_std=0.3,
                       eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
    path = tmp_path_factory.mktemp("ppl") / "deamoe"
    DeaMoEForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def direct_nll(model, tok, text: str, window: int) -> tuple[float, int]:
    """NLL (float64) of every token of `text` after an end-of-text prefix; the tokens are scored
    in consecutive blocks of `window`, each block read with the `window` tokens ending just before
    its last token as context (the first block: the prefix and what precedes)."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    seq = [tok.eos_token_id] + ids
    nll = 0.0
    for a in range(0, len(ids), window):
        e = min(a + window, len(ids))  # predict ids[a:e] = seq[a+1:e+1]
        lo = max(0, e - window)
        with torch.no_grad():
            logits = model(torch.tensor([seq[lo:e]])).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        targets = torch.tensor(seq[lo + 1:e + 1])
        picked = logp[torch.arange(len(targets)), targets][a - lo:]
        nll -= float(picked.sum())
    return nll, len(ids)


def words(task: str, page: str) -> int:
    if task == "ptb":  # Mikolov: the words of each sentence plus its end of sentence
        return sum(len(line.split()) + 1 for line in page.split("\n") if line.strip())
    return len(re.split(r"\s+", page))  # the harness's wikitext count, on the page as shipped


def texts(task: str) -> list[tuple[str, str]]:
    """(page, scored text) per document, straight from the shipped file."""
    from deamoe.eval.tasks import ppl_utils

    with gzip.open(DATA_DIR / corpus.PERPLEXITY_FILES[task], "rt") as f:
        docs = corpus.corpus_docs(task, f.read(), MAX_CHARS)
    detok = ppl_utils.ptb_detokenizer if task == "ptb" else ppl_utils.wikitext_detokenizer
    return [(d["page"], detok(d)) for d in docs]


def test_pipeline_word_perplexity_equals_the_direct_computation(tmp_path, checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import deamoe.model  # noqa: F401  (registers DeaMoE with the Auto classes)

    s = EvalSettings(data_dir=str(DATA_DIR), hf_home=str(tmp_path / "hf"), tasks=("ptb", "wikitext2"),
                     limit=0, ppl_max_chars=MAX_CHARS, max_length=WINDOW, batch_size=4)
    runner.run_eval(s, checkpoint, "deamoe", tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "lm_eval.json").read_text())
    rows = {r["dataset"]: r for r in perplexity_rows("deamoe", doc)}

    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    tok = AutoTokenizer.from_pretrained(checkpoint)
    for task in ("ptb", "wikitext2"):
        docs = texts(task)
        nll, n_tok = map(sum, zip(*(direct_nll(model, tok, text, WINDOW) for _, text in docs)))
        n_words = sum(words(task, page) for page, _ in docs)
        assert n_tok > 4 * WINDOW, task  # several windows per document
        got = doc["results"][task]["word_perplexity,none"]
        assert math.log(got) == pytest.approx(nll / n_words, rel=1e-5), task
        assert doc["deamoe"]["corpora"][task] == {
            "documents": len(docs), "words": n_words, "tokens": n_tok,
            "bytes": sum(len(page.encode()) for page, _ in docs)}
        assert math.log(rows[task]["token_perplexity"]) == pytest.approx(nll / n_tok, rel=1e-5)
        assert rows[task]["tokens_per_word"] == pytest.approx(n_tok / n_words)
        # the window matters for this model: a longer one gives another NLL, which the pipeline did not
        longer, _ = map(sum, zip(*(direct_nll(model, tok, text, 2 * WINDOW) for _, text in docs)))
        assert abs(longer - nll) > 1e-4 * nll, task  # 10x the tolerance above


def test_a_window_longer_than_the_checkpoint_context_is_refused(tmp_path, checkpoint):
    s = EvalSettings(data_dir=str(DATA_DIR), hf_home=str(tmp_path / "hf"), tasks=("ptb",), max_length=512)
    with pytest.raises(ConfigError, match=r"eval.max_length=512 is longer than the context .* "
                                          r"\(max_position_embeddings=256\)"):
        runner.run_eval(s, checkpoint, "deamoe", tmp_path / "out")
    assert not (tmp_path / "out").exists()
