"""Tokenizers: a byte-level BPE trained here in seconds, or a named Hugging Face tokenizer.

Either way the result is saved as a Hugging Face tokenizer directory (tokenizer.json +
tokenizer_config.json) that goes into every checkpoint, so evaluation and vLLM load the model and
its tokenizer from one folder.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterable, Iterator

from deamoe.errors import DataError

EOS = "<|endoftext|>"
PAD = "<|pad|>"


def train_bpe(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE (GPT-2 style pre-tokenisation) and wrap it as a fast HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    interruptible(tok.train_from_iterator, texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=PAD, unk_token=None
    )


def interruptible(fn, *args, **kwargs):
    """fn(*args, **kwargs) on a worker thread while the main thread waits for it, so that Ctrl-C
    and SIGTERM stop the command at once.  The BPE trainer's merges run in Rust without the
    interpreter: called on the main thread, a signal's handler waited for the whole training (~30 s
    on the 285 MB corpus).  Nothing is written while it runs; on a stop the worker is left to the
    process's exit (a daemon thread)."""
    result: list = []
    failure: list[BaseException] = []

    def work():
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=work, name=getattr(fn, "__name__", "work"), daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)  # a signal's handler runs between these waits
    if failure:
        raise failure[0]
    return result[0]


def load_named(name: str):
    """A Hugging Face tokenizer by hub name or local path; offline without a cached copy -> DataError."""
    from transformers import AutoTokenizer

    # written as a path (a hub name never starts so): a missing folder is said at once, not
    # taken for a hub name that huggingface_hub then retries for half a minute
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().is_dir():
        raise DataError(f"data.tokenizer={name!r}: no such folder (a tokenizer saved with "
                        "save_pretrained, a Hugging Face hub name, or bpe to train one here)")
    try:
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # noqa: BLE001 - as `load`: a malformed tokenizer.json is a KeyError
        raise DataError(
            f"data.tokenizer={name!r} could not be loaded ({_first_line(exc)}); "
            "offline it must be a local directory or already in the Hugging Face cache; "
            "use data.tokenizer: bpe to train one here"
        ) from None
    if tok.eos_token is None:
        tok.eos_token = EOS
    return tok


def _first_line(exc: Exception) -> str:
    """A loader's exception as one short line: its type and its message's first line."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"


def build(kind: str, texts: Iterable[str], vocab_size: int):
    return train_bpe(texts, vocab_size) if kind == "bpe" else load_named(kind)


def load(directory: str | Path, vocab_size: int | None = None):
    """Load a tokenizer saved by `save`; a DataError naming the folder when its files do not
    load (truncated, hand-edited) or, given `vocab_size` (the shards' meta.json), when it holds
    another number of tokens than the shards were encoded with."""
    from transformers import AutoTokenizer

    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file() and not (directory / "tokenizer_config.json").is_file():
        raise DataError(f"no tokenizer in {directory} (run `python -m deamoe data` first)")
    try:
        tok = AutoTokenizer.from_pretrained(str(directory))
    except Exception as exc:  # noqa: BLE001 - JSON, OSError, ValueError, the Rust loader's own
        raise DataError(f"{directory}: the tokenizer cannot be loaded ({_first_line(exc)}); "
                        "rerun `python -m deamoe data`") from None
    if vocab_size is not None and len(tok) != vocab_size:
        raise DataError(f"{directory} holds {len(tok)} tokens, but meta.json beside it says vocab_size "
                        f"{vocab_size}: not the tokenizer of these shards; rerun `python -m deamoe data`")
    return tok


def encode_documents(tok, docs: Iterable[str], batch: int = 256) -> Iterator[list[int]]:
    """Token ids of each document followed by the end-of-text token (documents stay separated)."""
    eos = tok.eos_token_id
    buf: list[str] = []

    def flush():
        # a batch of whole books takes seconds in Rust, where no signal's handler runs: on a
        # worker thread as the trainer is, so that Ctrl-C stops the command at once
        for ids in interruptible(tok, buf, add_special_tokens=False)["input_ids"]:
            yield ids + [eos]

    for doc in docs:
        buf.append(doc)
        if len(buf) == batch:
            yield from flush()
            buf = []
    if buf:
        yield from flush()
