"""An output path through a `.git` folder is refused in one line before any work: a file and the
`.deamoe-output` marker were written among git's own records (`table1 --out .git/t.csv`, a
bench tool's folder `.git/x`), where the checks that keep a folder holding `.git` from being an
output folder did not look."""

from __future__ import annotations

import pytest

from cli_battery import run_cli, write_config

CFG = ["--config", "c.yaml"]
COMMANDS = {
    "table1": ["table1", "--out"],
    "loading": ["loading", *CFG, "--out"],
    "data": ["data", *CFG, "--out"],
    "microbench": ["microbench", *CFG, "--out"],
    "bench overread": ["bench", "overread"],
}


@pytest.fixture
def repo(work):
    write_config(work / "c.yaml")
    (work / ".git").mkdir()
    (work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return work


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("out", [".git/o.csv", "./.git/sub/o.csv", "sub/.git/o.csv"])
def test_an_output_through_dot_git_is_refused(repo, failing, command, out):
    failing([*COMMANDS[command], out], out.removeprefix("./"), "goes through .git")


def test_a_name_that_only_starts_with_dot_git_is_taken(repo, capsys):
    status, err = run_cli(["table1", "--out", ".github/t.csv"], capsys)
    assert status == 0, err
    assert (repo / ".github" / "t.csv").is_file()
