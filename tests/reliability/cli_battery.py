"""The reliability battery's tools: run a command in-process, and prove nothing else changed.

Each case runs `python -m deamoe ...` through `deamoe.cli.main` in this process (what the
console entry point runs, minus interpreter start-up), asserts its exit status and its one-line
message, and compares a hash of every file under the working folder before and after: a failed
command must leave the tree exactly as it was, a successful one may change only its declared
outputs.  A module of its own name (not `conftest`): the tests import these helpers, and a
`from conftest import` takes whichever folder's conftest was imported first.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def tree(root: Path) -> dict[str, str]:
    """{relative path: sha256 (files) or 'dir' (folders) or 'link' or 'special' (pipes)} of everything
    under root."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link"
            elif path.is_dir():
                out[rel] = "dir"
            elif not path.is_file():  # a pipe: reading it would wait for a writer
                out[rel] = "special"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, stderr) of `python -m deamoe ARGV`, run in this process."""
    from deamoe.cli import main

    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


def assert_one_line_error(status: int, err: str, *names: str) -> None:
    """Exit status 2, one line on stderr, no traceback, naming every one of `names`."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])


def assert_one_line_failure(status: int, err: str, *names: str) -> None:
    """A script's refusal: a nonzero exit status, one line on stderr naming every one of `names`."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert status != 0 and len(lines) == 1, err
    for name in names:
        assert name in lines[0], (name, err)


def write_config(path: Path, **sections) -> Path:
    """config.yaml (the tiny default) with `sections` merged over it, key by key."""
    doc = yaml.safe_load((REPO / "config.yaml").read_text())
    for name, values in sections.items():
        if isinstance(values, dict) and isinstance(doc.get(name), dict):
            doc[name] = {**doc[name], **values}
        else:
            doc[name] = values
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def train_config(path: Path, corpus: Path, **train) -> Path:
    """config.yaml for a very small model trained on the text files in `corpus` (a few seconds a
    run), with `train` merged over its train section."""
    return write_config(
        path,
        data={"source": "files", "files": [str(corpus / "*.txt")], "vocab_size": 300},
        model={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
               "max_position_embeddings": 32},
        train={"seq_len": 16, "batch_size": 4, "micro_batch_size": 2, "steps": 6, "warmup_steps": 2,
               "checkpoint_every": 3, "eval_batches": 2, "threads": 1, **train},
        ablation={"h_ffn": 16, "n_dept": 4, "n_expert": 8, "k_dept": 2, "k_expert": 3, "last_n": 3},
        pretrain={"sizes": {"t": {"baseline": {"h_ffn": 16, "n_expert": 8, "k_expert": 4},
                                  "deamoe": {"h_ffn": 16, "n_dept": 4, "n_expert": 8, "k_dept": 2,
                                             "k_expert": 4}}},
                  "seeds": [0], "max_budget_deviation": 0.05},
        serve={"input_len": 8, "output_len": 4},
    )


RUNS = ("pretrain-t-baseline-s0", "pretrain-t-deamoe-s0")  # the runs of train_config's size t, seed 0


def finished_runs(root: Path) -> None:
    """runs/RUN/summary.json and log.csv of both RUNS, as training finished them, and each one's
    evaluation (ev/RUN/lm_eval.json): what pretrain and eval-tables read."""
    from deamoe.io import write_json

    for run in RUNS:
        write_json(root / "runs" / run / "summary.json", {
            "run": run, "ffn_type": run.split("-")[2].replace("baseline", "moe"), "params": 1000,
            "hidden_size": 32, "num_hidden_layers": 1, "val_loss": 5.0, "tokens_per_s": 10.0,
            "git_sha": "abc1234", "date": "2026-01-01"})
        (root / "runs" / run / "log.csv").write_text("step,tokens,loss,lr\n1,64,6.0,0.001\n2,128,5.5,0.001\n"
                                                      "3,192,5.0,0.001\n")
        write_json(root / "ev" / run / "lm_eval.json", {"results": {"ptb": {"word_perplexity,none": 900.0}},
                                                         "n-samples": {"ptb": {"effective": 2}}})


def copy_shards(shards: Path, to: Path) -> Path:
    """A private copy of the token shards (to damage), tokenizer linked."""
    import shutil

    to.mkdir(parents=True)
    for name in ("train.bin", "val.bin", "meta.json"):
        shutil.copy(shards / "data" / name, to / name)
    (to / "tokenizer").symlink_to(shards / "data" / "tokenizer")
    return to
