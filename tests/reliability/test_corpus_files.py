"""Text the data step trains on, or the evaluation reads, that is not all there or not text: a
link to nothing among a glob's files, a NUL byte (a damaged or binary file) -- one line naming the
file (and line), never a corpus quietly short of a file or tokenised with NUL bytes."""

from __future__ import annotations

import gzip
import shutil

from cli_battery import REPO, write_config

TEXT = "It was a bright cold day in April, and the clocks were striking thirteen.\n" * 400


def _corpus(work, text=TEXT):
    (work / "corpus").mkdir()
    (work / "corpus" / "a.txt").write_text(text)
    write_config(work / "c.yaml", data={"source": "files", "files": ["corpus/*.txt"], "vocab_size": 300},
                 train={"seq_len": 16})


def test_a_link_to_nothing_among_the_corpus_files_is_named(work, failing):
    """It was left out of the corpus without a word (the other files were tokenised)."""
    _corpus(work)
    (work / "corpus" / "b.txt").symlink_to("moved.txt")
    failing(["data", "--config", "c.yaml", "--out", "d"], "data.files entry 'corpus/*.txt'", "corpus/b.txt",
            "a link to moved.txt, which does not exist")


def test_a_nul_byte_in_the_corpus_is_named_with_its_line(work, failing):
    _corpus(work, TEXT[:1000] + "\x00" + TEXT[1000:])
    failing(["data", "--config", "c.yaml", "--out", "d"], "corpus/a.txt:14: a NUL byte", "text file of the corpus")


def test_a_nul_byte_in_a_perplexity_corpus_is_named_with_its_line(work, failing):
    """PTB's check (lower case, no tabs) took a line of NUL bytes for a sentence."""
    shutil.copytree(REPO / "data" / "eval", work / "ev")
    lines = gzip.decompress((work / "ev" / "ptb_test.txt.gz").read_bytes()).split(b"\n")
    lines[2] = b"\x00" * 8
    (work / "ev" / "ptb_test.txt.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    write_config(work / "c.yaml", eval={"data_dir": "ev"})
    failing(["eval-data", "--config", "c.yaml"], "ev/ptb_test.txt.gz:3: a NUL byte", "perplexity corpus")
