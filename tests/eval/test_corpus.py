"""Perplexity corpora: document cuts, truncation, PTB word counts, the detokenizers."""

from __future__ import annotations

from pathlib import Path

import gzip
import importlib.util

import pytest

from deamoe.errors import DataError
from deamoe.eval import corpus
from deamoe.eval.runner import TASKS_DIR

# (not imported from conftest: several test folders have one, and which is found depends on order)
REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "data" / "eval"


def ppl_utils():
    spec = importlib.util.spec_from_file_location("ppl_utils", TASKS_DIR / "ppl_utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wikitext_cut_into_62_articles_losing_no_text():
    with gzip.open(DATA_DIR / "wikitext-2-raw_test.txt.gz", "rt") as f:
        text = f.read()
    pages = corpus.wikitext_pages(text)
    assert len(pages) == 62  # the harness's wikitext test split has 62 documents
    assert pages[0].startswith(" = Robert Boulter = \n") and pages[1].startswith(" = Du Fu = \n")
    assert all(corpus._is_title(p.split("\n")[0]) for p in pages)
    # only blank lines before the first heading are dropped
    assert sum(len(p.split("\n")) for p in pages) == len(text.split("\n")) - 1


def test_headings_of_sections_do_not_start_articles():
    assert corpus._is_title(" = Robert Boulter = ")
    assert not corpus._is_title(" = = Career = = ")
    assert not corpus._is_title(" = = = 2000 – 2005 = = = ")
    assert corpus.wikitext_pages(" = A = \n x \n = = s = = \n y \n = B = \n z \n") == \
        [" = A = \n x \n = = s = = \n y ", " = B = \n z \n"]


def test_truncate_cuts_at_a_line_end():
    text = "aaa\nbbb\nccc\n"
    assert corpus.truncate(text, 0) == text
    assert corpus.truncate(text, 6) == "aaa\n"
    assert corpus.truncate(text, 8) == "aaa\nbbb\n"
    assert corpus.truncate(text, 100) == text


def test_max_chars_bounds_every_corpus():
    for task in corpus.PERPLEXITY_TASKS:
        docs = corpus.shipped_docs(task, DATA_DIR, max_chars=5000)
        assert 0 < sum(len(d["page"]) for d in docs) <= 5000


def test_ptb_is_one_document_with_mikolov_word_count():
    (doc,) = corpus.shipped_docs("ptb", DATA_DIR)
    assert ppl_utils().ptb_words(doc["page"]) == 82430  # 78,669 words + 3,761 <eos>


def test_ptb_detokenizer_rejoins_clitics_only():
    u = ppl_utils()
    out = u.ptb_detokenizer({"page": " it 's N <unk> and they did n't go \n we 'll see \n"})
    assert out == "it's N <unk> and they didn't go\nwe'll see"
    ll = -10.0
    res = u.ptb_process_results({"page": " a b \n c \n"}, (ll,))
    assert res["word_perplexity"] == (ll, 5) and res["byte_perplexity"] == (ll, 10)


def test_hub_ptb_rows_rebuild_the_file_format():
    with gzip.open(DATA_DIR / "ptb_test.txt.gz", "rt") as f:
        text = f.read()
    rows = [line.strip() for line in text.split("\n") if line.strip()]
    rebuilt = "".join(f" {r} \n" for r in rows)
    assert rebuilt == text


@pytest.mark.parametrize("task,text,msg", [
    ("ptb", " a b \n\n c \n", ":2: empty line"),
    ("ptb", " a B \n", ":1: not PTB text"),
    ("wikitext2", "no headings here\n", ":1: no ' = Title = ' heading"),
])
def test_bad_corpus_names_file_and_line(tmp_path, task, text, msg):
    path = tmp_path / corpus.PERPLEXITY_FILES[task]
    with gzip.open(path, "wt") as f:
        f.write(text)
    with pytest.raises(DataError, match=rf"{path.name}{msg}"):
        corpus.shipped_docs(task, tmp_path)
