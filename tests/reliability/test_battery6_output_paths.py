"""Output paths that would not be written where they read: `-` (stdout to other tools) and `..`
after a folder that does not exist yet.  Each is one line naming the path before any work, and
nothing is written (`--out -` wrote a file or folder named '-'; `data --out sub/..` wrote the
token shards and a marker into the working directory)."""

from __future__ import annotations

import pytest

from cli_battery import REPO, run_cli, write_config

CFG = ["--config", "c.yaml"]
COMMANDS = {
    "table1": ["table1"],
    "loading": ["loading", *CFG],
    "ablation": ["ablation", *CFG, "--runs", "runs"],
    "pretrain": ["pretrain", *CFG, "--runs", "runs"],
    "data": ["data", *CFG],
    "train": ["train", *CFG, "--run", "ablation-no1-s0", "--data", "runs"],
    "eval-tables": ["eval-tables", *CFG, "--in", "runs"],
    "serve-tables": ["serve-tables", *CFG, "--in", "runs"],
    "microbench": ["microbench", *CFG],
}


@pytest.fixture
def inputs(work):
    write_config(work / "c.yaml")
    (work / "runs" / "x").mkdir(parents=True)
    return work


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("out", ["-", "./-", "o/-"])
def test_an_output_through_dash_is_refused_not_written_as_a_file_named_dash(inputs, failing, command, out):
    failing([*COMMANDS[command], "--out", out], "-", "stdout")


@pytest.mark.parametrize("argv", [
    ["bench", "overread", "-"], ["bench", "smem-check", "-"], ["bench", "peer", "extract", "--to", "-"],
    ["bench", "import", "runs", "--dest", "-"],
])
def test_a_bench_tools_output_through_dash_is_refused(inputs, failing, argv):
    import shutil

    shutil.copy(REPO / "reports" / "measured" / "h200" / "microbench.csv", inputs / "runs")
    failing(argv, "-", "stdout")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("out", ["sub/../x", "runs/no/../../y"])
def test_dot_dot_after_a_folder_that_does_not_exist_is_refused(inputs, failing, command, out):
    failing([*COMMANDS[command], "--out", out], "'..' after", "does not exist")


@pytest.mark.parametrize("command", ["data", "train", "microbench", "eval-tables"])
def test_a_folder_output_of_dot_dot_after_nothing_is_not_the_working_directory(inputs, failing, command):
    failing([*COMMANDS[command], "--out", "sub/.."], "sub/..", "'..' after sub")


def test_dot_dot_after_an_existing_folder_is_taken(inputs, capsys):
    status, err = run_cli(["table1", "--out", "runs/../t.csv"], capsys)
    assert status == 0, err
    assert (inputs / "t.csv").is_file()
