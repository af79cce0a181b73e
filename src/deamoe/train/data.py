"""Corpus -> tokenizer + memory-mapped token shards (train.bin, val.bin, meta.json).

Sources (config `data.source`):
  bundled    data/corpus/gutenberg-slice.txt.gz, shipped with the project (offline default)
  files      local files or globs (`data.files`), e.g. the 100 MB Gutenberg corpus for GPU runs
  redpajama  RedPajama-v1 through `datasets` (the paper's corpus; needs the network)

Documents stay separate: each ends with the end-of-text token.  The held-out text (`val_split`)
is either the last `val_fraction` of every document's tokens (`tail`: train and validation cover
the same books without sharing text) or whole documents that no run trains on (`documents`: a
document is held out when the SHA-256 of its text falls in the lowest `val_fraction` of the hash
range, so the choice is stable as the corpus grows; the BPE is trained on the rest).  Batches are drawn from the memmap by a generator seeded with
(seed, step): any rank, any restart, same step -> same global batch.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from deamoe.errors import DataError, not_a_file
from deamoe.io import atomic_dir, atomic_outputs, atomic_path
from deamoe.readers import no_nul, read_text
from deamoe.train.settings import DataSettings

DOC_SEPARATOR = "\n\x1e\n"  # joins the books of the bundled corpus
REPO_ROOT = Path(__file__).resolve().parents[3]
BUNDLED = REPO_ROOT / "data" / "corpus" / "gutenberg-slice.txt.gz"


def _read(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"corpus file {path}: {not_a_file(path)}")
    return no_nul(read_text(path), path, "text file of the corpus")


def _split_docs(text: str) -> list[str]:
    return [d for d in text.split(DOC_SEPARATOR) if d.strip()]


def corpus_files(patterns) -> list[Path]:
    """The regular files data.files names (globs, `~` expanded), in order; a DataError names an
    entry that matches nothing or only folders.  The workflow checks the config with it too."""
    paths: list[Path] = []
    for pattern in patterns:
        hits = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
        if not hits:
            raise DataError(f"data.files entry {pattern!r} matches no file")
        files = [Path(h) for h in hits if Path(h).is_file()]
        # a pipe, device or link to nothing: beside other files it was left out of the corpus unsaid
        odd = next((h for h in hits if not Path(h).is_file() and not Path(h).is_dir()), None)
        if odd is not None and files:
            raise DataError(f"data.files entry {pattern!r} matches {odd}: {not_a_file(odd)}")
        if odd is not None:
            raise DataError(f"data.files entry {pattern!r} matches no regular file ({odd}: {not_a_file(odd)})")
        if not files:
            raise DataError(f"data.files entry {pattern!r} matches no regular file (only "
                            f"{'a folder' if len(hits) == 1 else 'folders'}: give a glob of its text "
                            f"files, e.g. '{hits[0].rstrip('/')}/*.txt')")
        paths += files
    return paths


def _redpajama(settings: DataSettings) -> Iterator[tuple[str, str]]:
    if settings.max_bytes <= 0:
        raise DataError("data.source=redpajama needs data.max_bytes > 0 (the corpus is 1T tokens)")
    try:
        import datasets
    except ImportError:
        raise DataError("data.source=redpajama needs the `datasets` package (pip install datasets)") from None
    try:
        stream = datasets.load_dataset(settings.redpajama_name, split="train", streaming=True)
        for i, row in enumerate(stream):
            yield f"{settings.redpajama_name}#{i}", row["text"]
    except Exception as exc:  # offline, gated, renamed: one line that names the dataset
        raise DataError(
            f"data.redpajama_name={settings.redpajama_name!r} could not be streamed "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}); "
            "it needs the network: use data.source: bundled or files offline"
        ) from None


def iter_documents(settings: DataSettings) -> Iterator[tuple[str, str]]:
    """(name, text) of every document of the configured source, up to data.max_bytes of text."""
    if settings.source == "bundled":
        texts = ((f"{BUNDLED.name}#{i}", d) for i, d in enumerate(_split_docs(_read(BUNDLED))))
    elif settings.source == "files":
        texts = (
            (f"{p}#{i}", d) for p in corpus_files(settings.files) for i, d in enumerate(_split_docs(_read(p)))
        )
    else:
        texts = _redpajama(settings)
    budget = settings.max_bytes or None
    for name, text in texts:
        if budget is not None:
            if budget <= 0:
                return
            text = text[:budget]
            budget -= len(text.encode("utf-8"))
        yield name, text


def held_out_whole(text: str, fraction: float) -> bool:
    """Whether val_split=documents holds this document out: the top 64 bits of the SHA-256 of its
    text, as a fraction of 2**64, below `fraction`."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


def _sources(settings: DataSettings) -> str:
    """The files (or dataset) a source reads, for a message."""
    if settings.source == "files":
        paths = corpus_files(settings.files)
        more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
        if not paths:
            return f"data.files {list(settings.files)}, which match no regular file"
        return f"data.files {list(settings.files)}: {', '.join(map(str, paths[:3])) + more}"
    return str(BUNDLED) if settings.source == "bundled" else settings.redpajama_name


def min_tokens(split: str, seq_len: int) -> int:
    """The fewest tokens a split needs for one window of seq_len and its next-token targets: the
    held-out windows are laid end to end (seq_len + 1); a training window starts at a random
    offset below len - seq_len - 1, which must leave at least one (seq_len + 2)."""
    return seq_len + (2 if split == "train" else 1)


def prepare(settings: DataSettings, out: str | Path, progress: bool = True, seq_len: int = 0) -> dict:
    """Write out/{tokenizer/, train.bin, val.bin, meta.json}; return the meta dict.  seq_len (the
    training sequence length, 0: not checked): each split holds at least one window of it, else
    nothing is written and the data step fails naming it, not every training job after it.

    Two streaming passes over the corpus (BPE training, then encoding), appending tokens to the
    shard files, so the corpus never has to fit in memory.
    """
    from tqdm import tqdm

    from deamoe.provenance import provenance
    from deamoe.train import tokenizer as toklib

    out = Path(out)
    whole = settings.val_split == "documents"
    held = (lambda t: held_out_whole(t, settings.val_fraction)) if whole else (lambda t: False)  # noqa: E731
    texts = lambda: (t for _, t in iter_documents(settings))  # noqa: E731
    if not any(t.strip() for t in texts()):
        raise DataError(f"data.source={settings.source}: the corpus is empty; no text in {_sources(settings)}")
    # the tokenizer never sees a held-out document
    tok = toklib.build(settings.tokenizer, (t for t in texts() if not held(t)), settings.vocab_size)
    vocab = len(tok)
    dtype = np.uint16 if vocab <= np.iinfo(np.uint16).max else np.uint32

    # the shards, the tokenizer and meta.json are written beside the folder and moved in together
    # (a stop waits for the moves, meta.json last): a stopped run leaves the earlier data or none,
    # never new shards described by old metadata
    with atomic_outputs() as outputs:
        meta_tmp = outputs.enter_context(atomic_path(out / "meta.json"))
        tok_tmp = outputs.enter_context(atomic_dir(out / "tokenizer"))
        train_tmp = outputs.enter_context(atomic_path(out / "train.bin"))
        val_tmp = outputs.enter_context(atomic_path(out / "val.bin"))
        n_docs = n_train = n_val = 0
        held_names: list[str] = []
        digest = hashlib.sha256()
        with open(train_tmp, "wb") as ftrain, open(val_tmp, "wb") as fval:
            seen = [0]  # bytes of text read, counted as the documents stream past
            flags: deque[bool] = deque()  # held out or not, per document encoded but not yet written

            def counted():
                for name, t in tqdm(iter_documents(settings), desc="tokenise", unit="doc", disable=not progress):
                    seen[0] += len(t.encode("utf-8"))
                    flags.append(held(t))
                    if flags[-1]:
                        held_names.append(f"{Path(name.split('#')[0]).name}#{name.split('#')[-1]}")
                    yield t

            for ids in toklib.encode_documents(tok, counted()):
                ids = np.asarray(ids, dtype=dtype)
                k = int(round(len(ids) * settings.val_fraction))
                if whole:
                    k = len(ids) if flags.popleft() else 0
                train_part, val_part = ids[: len(ids) - k], ids[len(ids) - k :]
                ftrain.write(train_part.tobytes())
                fval.write(val_part.tobytes())
                digest.update(train_part.tobytes())
                n_docs, n_train, n_val = n_docs + 1, n_train + len(train_part), n_val + len(val_part)
        if n_val < 2:
            raise DataError(f"data: the held-out split has {n_val} tokens; raise data.val_fraction or use more text")
        if n_train == 0:
            raise DataError("data: val_split=documents held out every document; lower data.val_fraction "
                            "or use more text")
        for split, n, need in (("held-out", n_val, min_tokens("val", seq_len)),
                               ("training", n_train, min_tokens("train", seq_len))):
            if seq_len and n < need:
                raise DataError(f"data: the {split} split has {n} tokens, fewer than the {need} of one window "
                                f"of train.seq_len={seq_len}; raise data.max_bytes or data.val_fraction, "
                                "or use more text")
        tok.save_pretrained(str(tok_tmp))
        meta = {
            "source": settings.source,
            "tokenizer": settings.tokenizer,
            "vocab_size": vocab,
            "dtype": np.dtype(dtype).name,
            "documents": n_docs,
            "text_bytes": seen[0],
            "train_tokens": n_train,
            "val_tokens": n_val,
            "val_fraction": settings.val_fraction,
            "val_split": settings.val_split,
            "val_documents": held_names if whole else None,
            "train_sha256": digest.hexdigest(),
            **provenance("cpu"),
        }
        meta_tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return meta


def corpus_fields(meta: dict, tokens: int) -> dict:
    """What a run's row says of its text: the training corpus in tokens, the passes (epochs) the
    run's `tokens` make over it (batches are windows at uniform random offsets: expected passes),
    how the held-out text was chosen and a digest naming the training tokens."""
    corpus = int(meta["train_tokens"])
    return {"corpus_tokens": corpus, "epochs": tokens / corpus if corpus else None,
            "val_tokens": int(meta["val_tokens"]), "val_split": meta.get("val_split", "tail"),
            "data_sha256": str(meta.get("train_sha256", ""))[:16]}


@dataclass
class TokenData:
    """The shards of one data directory, memory-mapped, with deterministic batch sampling."""

    directory: Path
    meta: dict
    train: np.ndarray
    val: np.ndarray

    @classmethod
    def open(cls, directory: str | Path) -> "TokenData":
        from deamoe.readers import read_token_shards

        meta, train, val = read_token_shards(directory)  # every malformed file named
        return cls(Path(directory), meta, train, val)

    def train_batch(self, step: int, seed: int, batch_size: int, seq_len: int, rows: slice):
        """Rows `rows` of the global batch of `step`: (inputs, targets) int64 [len(rows), seq_len]."""
        import torch

        if len(self.train) < min_tokens("train", seq_len):
            raise DataError(f"{self.directory}/train.bin has {len(self.train)} tokens, fewer than train.seq_len+2")
        rng = np.random.default_rng([seed, step])
        starts = rng.integers(0, len(self.train) - seq_len - 1, size=batch_size)[rows]
        return self._windows(self.train, starts, seq_len)

    def val_batches(self, n_batches: int, batch_size: int, seq_len: int):
        """The first n_batches * batch_size non-overlapping windows of the held-out split."""
        if len(self.val) < min_tokens("val", seq_len):
            raise DataError(f"{self.directory}/val.bin has {len(self.val)} tokens, fewer than train.seq_len+1")
        starts = np.arange(min((len(self.val) - 1) // seq_len, n_batches * batch_size)) * seq_len
        for i in range(0, len(starts), batch_size):
            yield self._windows(self.val, starts[i : i + batch_size], seq_len)

    @staticmethod
    def _windows(arr: np.ndarray, starts: np.ndarray, seq_len: int):
        import torch

        block = np.stack([np.asarray(arr[s : s + seq_len + 1], dtype=np.int64) for s in starts])
        t = torch.from_numpy(block)
        return t[:, :-1], t[:, 1:]
