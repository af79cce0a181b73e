"""deamoe.train.tokenizer: a tokenizer named by data.tokenizer that does not load is one line
naming the key, whatever the loader raises; the BPE training and the encoding stop at once on Ctrl-C."""

from __future__ import annotations

import hashlib
import os
import signal
import threading

import pytest

from deamoe.errors import DataError
from deamoe.train.tokenizer import encode_documents, interruptible, load_named


@pytest.mark.parametrize("text", ['{"bad": 1}', "{", ""])
def test_a_malformed_local_tokenizer_is_named(tmp_path, text):
    (tmp_path / "tokenizer.json").write_text(text)  # a KeyError, a JSON error, nothing
    with pytest.raises(DataError, match=r"^data.tokenizer='.*' could not be loaded \(\w+"):
        load_named(str(tmp_path))


@pytest.mark.parametrize("name", ["/no/such/tokenizer", "./no-such-tokenizer", "../no-such", "~/no-such-tokenizer"])
def test_a_tokenizer_path_that_does_not_exist_is_named_before_any_hub_lookup(monkeypatch, name):
    # taken for a hub name, huggingface_hub retried it for ~25 s before the one line
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: pytest.fail("looked up as a hub name"))
    with pytest.raises(DataError, match=r"^data.tokenizer='.*': no such folder"):
        load_named(name)


def test_a_result_and_an_error_come_back_from_the_worker():
    assert interruptible(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
    with pytest.raises(ZeroDivisionError):
        interruptible(divmod, 1, 0)


def test_ctrl_c_stops_a_call_that_runs_outside_the_interpreter_at_once():
    """pbkdf2_hmac, like the BPE trainer's merges, runs in C without the interpreter: on the
    main thread a Ctrl-C's handler would wait the whole call (~3 s here); through
    `interruptible` it is raised while the call still runs."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            interruptible(hashlib.pbkdf2_hmac, "sha256", b"x", b"salt", 12_000_000)
        still_running = [t for t in threading.enumerate() if t.name == "pbkdf2_hmac"]
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
    assert still_running, "the call had ended before KeyboardInterrupt was raised"
    assert all(t.daemon for t in still_running)  # left to the process's exit



class _Tokenizer:
    """A tokenizer's batch call: one id a text; `slow` runs ~3 s in C without the interpreter
    first, as the fast tokenizer's encoding of 256 whole books does in Rust."""
    eos_token_id = 0

    def __init__(self, slow: bool = False):
        self.slow = slow

    def __call__(self, texts, add_special_tokens=False):
        if self.slow:
            hashlib.pbkdf2_hmac("sha256", b"x", b"salt", 12_000_000)
        return {"input_ids": [[len(t)] for t in texts]}


def test_documents_are_encoded_in_batches_each_ended_by_the_end_of_text_token():
    assert list(encode_documents(_Tokenizer(), ["a", "bb", "ccc"], batch=2)) == [[1, 0], [2, 0], [3, 0]]


def test_ctrl_c_stops_the_encoding_of_a_batch_at_once():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            list(encode_documents(_Tokenizer(slow=True), ["a book", "another"]))
        still_running = [t for t in threading.enumerate() if t.name == "work"]
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
    assert still_running, "the batch had been encoded before KeyboardInterrupt was raised"
