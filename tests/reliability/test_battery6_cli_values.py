"""Comma-separated part lists and the folders a join reads, as users mistype them: each is one
line naming the option before any work, and nothing changes.  (A part given twice ran or skipped
it twice without a word; `--skip ,` skipped nothing; a missing --eval folder was named only as a
missing run's summary, or after every run was read.)"""

from __future__ import annotations

import pytest

from cli_battery import REPO, write_config

MICRO = ["microbench", "--config", "c.yaml", "--out", "mb"]
TRAIN = ["bench", "train", "o", "--config", "c.yaml"]


@pytest.mark.parametrize("argv, names", [
    (MICRO + ["--skip", ","], ["--skip", "an empty name"]),
    (MICRO + ["--skip", "decode,decode"], ["--skip", "decode twice"]),
    (MICRO + ["--skip", "decode,,torch"], ["--skip", "an empty name"]),
    (MICRO + ["--skip", "nothing"], ["--skip", "nothing"]),
    (TRAIN + ["--parts", "layer,layer"], ["--parts", "layer twice"]),
    (TRAIN + ["--parts", "layer,"], ["--parts", "an empty name"]),
    (TRAIN + ["--paths", "torch,torch"], ["--paths", "torch twice"]),
    (TRAIN + ["--paths", "jit"], ["--paths", "'jit'"]),
])
def test_a_part_list_with_a_name_twice_or_empty_is_named(work, failing, argv, names):
    write_config(work / "c.yaml")
    failing(argv, *names)


def test_microbench_skipping_every_cuda_part_runs_on_cpu(work, capsys):
    from cli_battery import run_cli

    write_config(work / "c.yaml")
    status, err = run_cli(MICRO + ["--skip", "battery, roofline"], capsys)
    assert status == 0, err
    assert (work / "mb" / "status.json").is_file()


@pytest.mark.parametrize("setup, names", [
    (lambda w: None, ["noeval", "no such folder", "--eval"]),
    (lambda w: (w / "noeval").write_text("x"), ["noeval", "a file, not a folder", "--eval"]),
])
def test_a_pretrain_evaluations_folder_that_is_none_is_named_before_the_runs(work, failing, setup, names):
    write_config(work / "c.yaml")
    (work / "runs").mkdir()
    setup(work)
    failing(["pretrain", "--config", "c.yaml", "--runs", "runs", "--out", "p.csv", "--eval", "noeval"], *names)


def test_bench_train_default_parts_and_paths_still_parse():
    from deamoe.cli import build_parser

    args = build_parser().parse_args(["bench", "train", "o"])
    assert (args.parts, args.paths) == (["layer", "step"], ["torch", "fast+compile"])
    assert build_parser().parse_args(["microbench", "--config", str(REPO / "config.yaml"), "--out", "o"]).skip == []


@pytest.mark.parametrize("dest, how", [("d", "is run folder d"), ("d/sub", "lies inside run folder d")])
def test_import_never_writes_into_the_run_folder_it_imports(work, failing, dest, how):
    """A device run's folder holds the tables deamoe wrote there: --dest d replaced what it read."""
    import shutil

    (work / "d").mkdir()
    shutil.copy(REPO / "reports" / "measured" / "h200" / "microbench.csv", work / "d")
    failing(["bench", "import", "d", "--dest", dest], "--dest", how)
