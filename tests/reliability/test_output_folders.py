"""A folder a command writes its files into is never the user's, and no output is an input.

`data`, `train`, `eval`, the table commands, `microbench`, `report` and the bench tools write
files into an output folder beside what is already there: a folder of the user's files, a link,
the working directory (or a folder above it) and a checkout are refused before any work.  An output
that is, or lies inside, an input or another output of the same command is refused too (a
summary written over the training log it reads, a server log where the results folder goes).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cli_battery import run_cli, write_config

# each command with its output folder last; the inputs are checked before the output or need none
FOLDER_COMMANDS = [
    ["data", "--config", "c.yaml", "--out"],
    ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "d", "--out"],
    ["eval-tables", "--config", "c.yaml", "--in", "ins", "--out"],
    ["serve-tables", "--config", "c.yaml", "--in", "ins", "--out"],
    ["microbench", "--config", "c.yaml", "--out"],
    ["report", "--config", "c.yaml", "--results", "ins", "--measured", "ins", "--out"],
    ["bench", "overread", "--draws", "1"],
]


@pytest.fixture
def inputs(work):
    write_config(work / "c.yaml")
    (work / "ins" / "m").mkdir(parents=True)
    (work / "ins" / "m" / "lm_eval.json").write_text("{}")
    (work / "ins" / "m" / "c1.json").write_text("{}")
    return work


def _ids(commands):
    return [" ".join(c[:2]) for c in commands]


@pytest.mark.parametrize("command", FOLDER_COMMANDS, ids=_ids(FOLDER_COMMANDS))
def test_a_folder_of_the_users_files_is_no_output_folder(inputs, failing, command):
    (inputs / "mine").mkdir()
    (inputs / "mine" / "notes.txt").write_text("precious")
    failing([*command, "mine"], "mine", "notes.txt", "did not write")
    assert (inputs / "mine" / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize("target, names", [
    (".", ["working directory"]), ("..", [".. is the working directory or holds it"]),
    ("link", ["link", "is a link"]),
])
@pytest.mark.parametrize("command", FOLDER_COMMANDS, ids=_ids(FOLDER_COMMANDS))
def test_the_working_directory_root_or_a_link_is_no_output_folder(inputs, failing, command, target, names):
    (inputs / "elsewhere").mkdir()
    (inputs / "link").symlink_to(inputs / "elsewhere")
    failing([*command, target], *names)


def test_a_checkout_is_no_output_folder(inputs, failing):
    (inputs / "checkout" / ".git").mkdir(parents=True)
    failing(["data", "--config", "c.yaml", "--out", "checkout"], "checkout", ".git")


def test_a_folder_of_folders_or_of_deamoes_files_is_an_output_folder(inputs, capsys):
    (inputs / "results" / "eval" / "run").mkdir(parents=True)  # e.g. results/eval before eval-tables
    for out in ("results/eval", "results/eval"):  # the second time: its own files, replaced
        status, err = run_cli(["bench", "overread", "--draws", "1", out], capsys)
        assert status == 0, err
    assert (inputs / "results" / "eval" / "dense_overread.csv").is_file()


@pytest.mark.parametrize("out, names", [
    ("runs/r/log.csv", ["--out runs/r/log.csv", "lies inside --runs runs"]),
    ("runs", ["--out runs is --runs runs"]),
    ("s/curves.csv", ["--out s/curves.csv is its curves table"]),
])
@pytest.mark.parametrize("command", ["ablation", "pretrain"])
def test_a_summary_is_never_written_over_what_it_reads_or_its_own_curves(inputs, failing, command, out,
                                                                         names):
    (inputs / "runs" / "r").mkdir(parents=True)
    (inputs / "runs" / "r" / "log.csv").write_text("step,tokens,loss\n1,8,7.5\n")
    failing([command, "--config", "c.yaml", "--runs", "runs", "--out", out], *names)


def test_pretrain_never_writes_into_the_evaluations_it_joins(inputs, failing):
    (inputs / "runs").mkdir()
    failing(["pretrain", "--config", "c.yaml", "--runs", "runs", "--eval", "ins", "--out", "ins/s.csv"],
            "--out ins/s.csv lies inside --eval ins")


@pytest.mark.parametrize("command", ["eval", "serve"])
@pytest.mark.parametrize("out", ["ck", "ck/sub"])
def test_a_checkpoint_is_never_an_output_folder(inputs, failing, command, out):
    (inputs / "ck").mkdir()
    (inputs / "ck" / "config.json").write_text("{}")
    how = "is" if out == "ck" else "lies inside"
    failing([command, "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", out],
            f"--out {out} {how} --checkpoint ck")


@pytest.mark.parametrize("log, names", [
    ("sv", ["--out sv is --log sv"]),
    ("sv/server.log", ["--log sv/server.log lies inside --out sv"]),
])
def test_a_server_log_is_never_where_the_results_folder_goes(inputs, failing, checkpoint, log, names):
    """Before the fix the log was written first, and the results folder then refused: a failed
    command that left the log behind and blamed a file it had made itself."""
    failing(["serve", "--config", "c.yaml", "--checkpoint", checkpoint, "--model", "deamoe", "--out", "sv",
             "--log", log], *names)
    assert not Path("sv").exists()


@pytest.fixture
def read_only(inputs):
    """inputs/ro, a folder nothing can be written into (root ignores its mode: then chattr +i)."""
    folder = inputs / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK) and subprocess.run(["chattr", "+i", folder], capture_output=True).returncode:
        folder.chmod(0o755)
        pytest.skip("this user can write into any folder here, and chattr +i is not allowed")
    yield folder
    subprocess.run(["chattr", "-i", folder], capture_output=True)
    folder.chmod(0o755)


FILE_COMMANDS = [["table1", "--models", "Baseline-7B", "--out"],
                 ["loading", "--models", "Baseline-7B", "--tokens", "1", "--trials", "2", "--out"]]


@pytest.mark.parametrize("out", ["ro", "ro/sub"])
@pytest.mark.parametrize("command", FOLDER_COMMANDS + FILE_COMMANDS, ids=_ids(FOLDER_COMMANDS + FILE_COMMANDS))
def test_a_folder_that_cannot_be_written_is_named_before_any_work(read_only, failing, monkeypatch, command, out):
    """It was found only when the finished work was renamed into place (Figure 2's Monte Carlo,
    the overread draws done for nothing), or as the lock file's bare OS error."""
    def work_started(*_, **__):
        raise AssertionError("the work started")

    monkeypatch.setattr("deamoe.analysis.loading.loading_table", work_started)
    monkeypatch.setattr("deamoe.analysis.table1.table1", work_started)
    failing([*command, f"{out}/t.csv" if command in FILE_COMMANDS else out], "ro", "cannot write here")
