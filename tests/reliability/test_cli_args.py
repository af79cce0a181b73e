"""Every bad command-line value is one line naming the argument, before any work; nothing changes."""

from __future__ import annotations

import pytest

from cli_battery import assert_one_line_error, run_cli, write_config

BUDGET = ["budget", "--h", "8", "--h-ffn", "4", "--n-expert", "8", "--k-expert", "2", "--n-dept", "2",
          "--dea-n-expert", "8", "--k-dept", "1", "--dea-k-expert", "2"]


def _budget(flag, value):
    argv = list(BUDGET)
    argv[argv.index(flag) + 1] = value
    return argv


TRAIN = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "d", "--out", "r"]
LOADING = ["loading", "--config", "c.yaml", "--out", "l.csv"]
MICRO = ["microbench", "--config", "c.yaml", "--out", "mb"]

CASES = [
    # train
    (TRAIN + ["--steps", "-5"], ["--steps", "'-5'"]),
    (TRAIN + ["--steps", "0"], ["--steps", ">= 1"]),
    (TRAIN + ["--steps", "x"], ["--steps", "'x'"]),
    (TRAIN + ["--steps", "1.5"], ["--steps"]),
    (TRAIN + ["--max-seconds", "0"], ["--max-seconds", "> 0"]),
    (TRAIN + ["--max-seconds", "-1"], ["--max-seconds"]),
    (TRAIN + ["--max-seconds", "nan"], ["--max-seconds"]),
    (TRAIN + ["--max-seconds", "inf"], ["--max-seconds"]),
    (TRAIN + ["--max-seconds", "soon"], ["--max-seconds"]),
    (["train", "--config", "c.yaml", "--run", "bogus", "--data", "d", "--out", "r"], ["bad run name 'bogus'"]),
    (TRAIN, ["no token shards in d"]),
    # an empty value (an unset shell variable) for any argument, never the working folder
    (["train", "--config", "c.yaml", "--run", "x", "--data", " ", "--out", "r"], ["--data", "an empty value"]),
    (["bench", "smem-check", ""], ["argument out", "an empty value"]),
    # a name in another encoding than UTF-8: it failed as a fault of the program, after the work,
    # where the path was written into the folder's marker or the report
    (["table1", "--models", "Baseline-7B", "--out", "\udcff.csv"], ["--out", "b'\\xff.csv'", "not UTF-8"]),
    (["bench", "import", "run\udcff"], ["argument dirs", "not UTF-8"]),
    (["train", "--config", "c.yaml"], ["required", "--run"]),
    # loading
    (LOADING + ["--trials", "0"], ["--trials", "'0'"]),
    (LOADING + ["--trials", "1"], ["--trials", ">= 2"]),
    (LOADING + ["--trials", "-3"], ["--trials"]),
    (LOADING + ["--trials", "many"], ["--trials", "'many'"]),
    (LOADING + ["--tokens", "0"], ["--tokens", "'0'"]),
    (LOADING + ["--tokens", "-1"], ["--tokens", "'-1'"]),
    (LOADING + ["--tokens", "1,x"], ["--tokens", "'1,x'"]),
    (LOADING + ["--tokens", "1,,2"], ["--tokens"]),
    (LOADING + ["--tokens", ""], ["--tokens"]),
    (LOADING + ["--tokens", "1.5"], ["--tokens"]),
    (LOADING + ["--models", "GPT-9"], ["--models", "'GPT-9'"]),
    (LOADING + ["--models", ","], ["--models", "an empty name"]),
    (LOADING + ["--models", "DeepSeek-V3,,Qwen3-235B-A22B"], ["--models", "an empty name"]),
    (["loading", "--config", "nowhere.yaml", "--out", "l.csv"], ["nowhere.yaml", "does not exist"]),
    # table1
    (["table1", "--models", "GPT-9", "--out", "t.csv"], ["--models", "'GPT-9'"]),
    (["table1"], ["required", "--out"]),
    # budget: every size, and a conflict between sizes, named by its flag
    *[(_budget(flag, value), [flag]) for flag in BUDGET[1::2] for value in ("0", "-2", "x")],
    (_budget("--k-expert", "9"), ["--k-expert=9", "--n-expert=8"]),
    (_budget("--k-dept", "3"), ["--k-dept=3", "--n-dept=2"]),
    (_budget("--dea-n-expert", "7"), ["--dea-n-expert=7", "--n-dept=2"]),
    # microbench
    (MICRO + ["--batches", "0"], ["--batches"]),
    (MICRO + ["--batches", "4,a"], ["--batches", "'4,a'"]),
    (MICRO + ["--models", "Nope"], ["--models", "'Nope'"]),
    (MICRO + ["--skip", "everything"], ["--skip", "everything"]),
    (MICRO + ["--tiles-from", "no.csv"], ["--tiles-from", "no.csv"]),
    (MICRO + ["--skip", "decode", "--merge-decode-into", "t.csv"], ["--merge-decode-into"]),
    (MICRO + ["--merge-decode-into", "c.yaml"], ["c.yaml", "decode_tpot"]),
    (MICRO + ["--merge-decode-into", "mb/decode_tpot.csv"], ["--merge-decode-into", "own"]),
    (MICRO + ["--merge-decode-into", "."], ["--merge-decode-into", "folder"]),
    # commands reading what earlier stages wrote
    (["eval", "--config", "c.yaml", "--checkpoint", "nock", "--model", "deamoe", "--out", "e"], ["nock"]),
    (["eval-tables", "--config", "c.yaml", "--in", "noin", "--out", "et"], ["noin"]),
    (["serve", "--config", "c.yaml", "--checkpoint", "nock", "--model", "deamoe", "--out", "sv"], ["nock"]),
    (["serve-tables", "--config", "c.yaml", "--in", "noin", "--out", "st"], ["noin"]),
    (["ablation", "--config", "c.yaml", "--runs", "noruns", "--out", "a.csv"], ["noruns"]),
    (["pretrain", "--config", "c.yaml", "--runs", "noruns", "--out", "p.csv"], ["noruns"]),
    (["data", "--config", "c.yaml", "--out", "c.yaml"], ["c.yaml"]),
    # the command line itself
    (["no-such-command"], ["no-such-command"]),
    # a flag the command does not take: named by the command, whose --help lists its flags
    (["table1", "--out", "t.csv", "--colour", "red"],
     ["deamoe table1: error: unrecognized arguments: --colour red", "deamoe table1 --help"]),
    (["bench", "import", "d", "--to", "x"], ["deamoe bench import: error", "--to x", "deamoe bench import --help"]),
    # an option given twice: argparse kept the last value without a word (b.csv written alone)
    (["table1", "--out", "a.csv", "--out", "b.csv"], ["--out", "given twice"]),
    (["table1", "--out=a.csv", "--ou", "b.csv"], ["--out", "given twice"]),
    (TRAIN + ["--steps", "100", "--steps", "5"], ["--steps", "given twice"]),
    (["bench", "import", "--sha", "abcdef1", "--sha", "abcdef2", "d"], ["--sha", "given twice"]),
    ([], ["required"]),
]


@pytest.mark.parametrize("argv, names", CASES, ids=[" ".join(c[0])[-60:] or "empty" for c in CASES])
def test_bad_argument_is_one_line_naming_it(work, failing, argv, names):
    write_config(work / "c.yaml")
    failing(argv, *names)


@pytest.mark.parametrize("content, names", [
    (b"a: [\n", ["c2.yaml", "cannot be parsed"]),
    (b"- 1\n", ["c2.yaml", "mapping at top level"]),
    (b"x: \"\xff\"\n", ["c2.yaml", "not UTF-8", "offset 4"]),
    (b"train: {steps: 'many'}\n", ["c2.yaml", "train.steps"]),
    (b"train: {stepz: 3}\n", ["c2.yaml", "unknown key train.stepz"]),
    (None, ["c2.yaml", "is a directory"]),
])
@pytest.mark.parametrize("command", [
    ["loading", "--out", "l.csv"], ["data", "--out", "d"], ["eval-data"], ["report"],
    ["train", "--run", "ablation-no1-s0", "--data", "d", "--out", "r"],
])
def test_bad_config_file_is_one_line_naming_it(work, failing, content, names, command):
    if content is None:
        (work / "c2.yaml").mkdir()
    else:
        (work / "c2.yaml").write_bytes(content)
    failing([*command, "--config", "c2.yaml"], *names)


@pytest.mark.timeout(60)  # a pipe read would wait for a writer
def test_a_config_that_is_a_pipe_is_named_as_such_not_as_missing(work, capsys):
    """A FIFO (or /dev/null) exists: 'does not exist' sent the user looking for a typo.  (Not
    `failing`: its tree of the folder would read the pipe.)"""
    import os

    os.mkfifo(work / "c2.yaml")
    status, err = run_cli(["loading", "--out", "l.csv", "--config", "c2.yaml"], capsys)
    assert_one_line_error(status, err, "c2.yaml", "is not a regular file")
    assert sorted(p.name for p in work.iterdir()) == ["c2.yaml"]


@pytest.mark.parametrize("sha", ["HEAD", " ", "abc1234+uncommitted"])
def test_a_git_sha_from_the_environment_that_is_no_sha_is_named_before_any_work(work, failing, monkeypatch, sha):
    """DEAMOE_GIT_SHA (the commit a tree without .git matches) went into every row's git_sha as
    given: 'HEAD' stood in the tables, a blank one was named only when a finished run's rows were
    read."""
    monkeypatch.setenv("DEAMOE_GIT_SHA", sha)
    failing(["table1", "--out", "t.csv"], "DEAMOE_GIT_SHA", "must be a commit's sha", repr(sha))
