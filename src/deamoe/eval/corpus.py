"""Perplexity corpora (Table 3): PTB, WikiText-103 and WikiText-2 test sets as harness documents.

Protocol (the same for all three; see data/eval/SOURCES.md for the discussion):
- WikiText: the raw test file is cut into articles at level-1 headings (" = Title = "), the way
  EleutherAI/wikitext_document_level builds the `page` documents the harness's `wikitext` task
  scores.  WikiText-103 raw test is byte-identical to WikiText-2 raw test, so one shipped file
  serves both tasks and their numbers are equal by construction.
- PTB (Mikolov's test set: one lower-cased sentence per line, <unk> and N kept) has no document
  boundaries: the whole test set is one document, i.e. one continuous stream as in the usual
  PTB protocol.
- `max_chars` (eval.ppl_max_chars, 0 = all) keeps only the first characters of a corpus, cut at a
  line end, before it is cut into documents: the tiny profile's way to bound the work.
  eval.limit then caps the number of documents, as for every task.
"""

from __future__ import annotations

from pathlib import Path

from deamoe.errors import DataError
from deamoe.eval.data import open_text
from deamoe.readers import no_nul

# task name -> shipped file in data/eval/
PERPLEXITY_FILES = {
    "ptb": "ptb_test.txt.gz",
    "wikitext103": "wikitext-2-raw_test.txt.gz",  # WT103 raw test == WT2 raw test (same sha256)
    "wikitext2": "wikitext-2-raw_test.txt.gz",
}
PERPLEXITY_TASKS = tuple(PERPLEXITY_FILES)

# Online mode: the hub datasets the same tasks read instead (name, config, split, field).
HUB_SOURCES = {
    "ptb": ("ptb-text-only/ptb_text_only", "penn_treebank", "test", "sentence"),
    "wikitext103": ("EleutherAI/wikitext_document_level", "wikitext-103-raw-v1", "test", "page"),
    "wikitext2": ("EleutherAI/wikitext_document_level", "wikitext-2-raw-v1", "test", "page"),
}


def truncate(text: str, max_chars: int) -> str:
    """The first `max_chars` characters, cut back to the last complete line (0 = all)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max_chars)
    return text[: cut + 1] if cut >= 0 else text[:max_chars]


def _is_title(line: str) -> bool:
    # " = Title = " is a level-1 heading; " = = Section = = " is not.
    s = line.replace("= = =", "===").replace("= =", "==").strip()
    return s.startswith("= ") and s.endswith(" =") and not s.startswith("==")


def wikitext_pages(text: str) -> list[str]:
    """Cut raw WikiText into articles, each starting at its level-1 heading line."""
    pages, current = [], []
    for line in text.split("\n"):
        if _is_title(line):
            if any(x.strip() for x in current):
                pages.append("\n".join(current))
            current = []  # blank lines before the first heading are dropped
        current.append(line)
    if any(x.strip() for x in current):
        pages.append("\n".join(current))
    return pages


def ptb_documents(text: str) -> list[str]:
    return [text] if text.strip() else []


def corpus_docs(task: str, text: str, max_chars: int = 0) -> list[dict]:
    text = truncate(text, max_chars)
    pages = ptb_documents(text) if task == "ptb" else wikitext_pages(text)
    return [{"page": p} for p in pages]


def shipped_docs(task: str, data_dir: str | Path, max_chars: int = 0) -> list[dict]:
    path = Path(data_dir) / PERPLEXITY_FILES[task]
    with open_text(path) as f:
        text = f.read()
    validate_corpus(task, path, text)
    return corpus_docs(task, text, max_chars)


def validate_corpus(task: str, path: Path, text: str) -> None:
    """PTB: one sentence per line, lower case (numbers are 'N'), no tabs; WikiText: has headings."""
    if not text.strip():
        raise DataError(f"{path}: empty corpus")
    no_nul(text, path, "perplexity corpus")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if task == "ptb":
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                raise DataError(f"{path}:{i}: empty line (PTB has one sentence per line)")
            if "\t" in line or any(w != w.lower() and w != "N" for w in line.split()):
                raise DataError(f"{path}:{i}: not PTB text (tabs or upper case): {line[:60]!r}")
    else:
        if not any(_is_title(line) for line in lines):
            raise DataError(f"{path}:1: no ' = Title = ' heading: not raw WikiText")


def hub_docs(task: str, max_chars: int = 0) -> list[dict]:
    """Online mode: the same documents built from the standard hub dataset."""
    import datasets

    name, config, split, field = HUB_SOURCES[task]
    try:
        rows = datasets.load_dataset(name, config, split=split)
    except Exception:  # noqa: BLE001 -- script datasets (ptb_text_only): the hub's parquet export
        rows = datasets.load_dataset(name, config, split=split, revision="refs/convert/parquet")
    if task == "ptb":  # one sentence per row -> the original file's ' words \n' lines
        return corpus_docs(task, "".join(f" {r[field].strip()} \n" for r in rows), max_chars)
    text = "\n".join(r[field] for r in rows)  # pages already; rebuilt stream, same cut
    return corpus_docs(task, text, max_chars)
