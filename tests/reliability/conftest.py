"""The reliability battery's fixtures (its helpers: cli_battery.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_battery import REPO, assert_one_line_error, finished_runs, run_cli, train_config, tree


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """An empty working folder, made the current directory."""
    root = tmp_path / "work"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def failing(work, capsys):
    """failing(argv, *names): the command fails in one line naming `names`; nothing changed."""

    def check(argv, *names):
        before = tree(work)
        status, err = run_cli(argv, capsys)
        assert_one_line_error(status, err, *names)
        assert tree(work) == before, "a failed command changed the tree"
        return err

    return check


@pytest.fixture
def finished(work) -> Path:
    """The working folder with c.yaml (train_config: size t, seed 0, over corpus/a.txt) and both of
    its pre-training runs finished and evaluated (cli_battery.finished_runs: runs/, ev/)."""
    (work / "corpus").mkdir()
    (work / "corpus" / "a.txt").write_text("text\n")
    train_config(work / "c.yaml", work / "corpus")
    finished_runs(work)
    return work


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny DeaMoE checkpoint written the way the train stage writes one (trainer._save_hf)."""
    import gzip

    import torch

    from deamoe.model import DeaMoEConfig, DeaMoEForCausalLM
    from deamoe.train.tokenizer import train_bpe
    from deamoe.train.trainer import _save_hf

    with gzip.open(REPO / "data" / "eval" / "wikitext-2-raw_test.txt.gz", "rt") as f:
        tok = train_bpe(f.read(20000).split("\n"), vocab_size=300)
    torch.manual_seed(0)
    cfg = DeaMoEConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, h_ffn=16, n_expert=8,
                       k_expert=3, n_dept=4, k_dept=2, eos_token_id=tok.eos_token_id)
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint"
    _save_hf(cfg, DeaMoEForCausalLM(cfg), None, tok, path)
    return path


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> Path:
    """A folder with 60 kB of the bundled corpus (a.txt), its config (c.yaml) and its token
    shards (data/, the `data` command run once)."""
    import gzip

    from deamoe.cli import main
    from deamoe.train.data import DOC_SEPARATOR

    root = tmp_path_factory.mktemp("corpus")
    books = gzip.decompress((REPO / "data" / "corpus" / "gutenberg-slice.txt.gz").read_bytes()).decode()
    (root / "a.txt").write_text(books.split(DOC_SEPARATOR)[0][:60000])
    config = train_config(root / "c.yaml", root)
    assert main(["data", "--config", str(config), "--out", str(root / "data")]) == 0
    return root


@pytest.fixture
def sh(tmp_path, make_workdir):
    """sh(script, *args, cwd=checkout, **env) -> (exit status, stderr) of bash scripts/SCRIPT run
    in `cwd` (default: the checkout's root), python3 on PATH being this interpreter (the scripts call
    it by that name), less Snakemake."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a script that got past its checks must not start the workflow in the repository
    (bin_dir / "python3").write_text('#!/bin/sh\n[ "$1 $2" != "-m snakemake" ] || { echo "python3 -m '
                                     'snakemake: not run by this test" >&2; exit 99; }\n'
                                     f'exec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)

    # a linked checkout without the developer's device assets (wheels there are for its Python)
    checkout = make_workdir(tmp_path / "checkout")

    def run(script, *args, cwd=checkout, **env):
        done = subprocess.run(["bash", str(checkout / "scripts" / script), *map(str, args)], cwd=cwd,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "DEAMOE_SLURM_TEST": "0",  # (CI sets 1: a cluster start)
                                   "PATH": f"{bin_dir}:{os.environ['PATH']}", **env})
        return done.returncode, done.stderr

    return run
