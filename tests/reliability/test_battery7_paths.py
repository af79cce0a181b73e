"""Odd output paths: a name too long to stage, a device, a pipe, a link to nowhere.

A file output whose name fits the file system but not with its staging folder's 10 more bytes
(`.NAME.xxxxxxxx`) was found only when the finished work was written, as "cannot write here
(File name too long)" naming the folder; now named before any work.  The others held already
and are kept so: nothing is written through them, and /dev/null stays the device it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cli_battery import run_cli

TABLE1 = ["table1", "--models", "Baseline-7B", "--out"]


def test_a_name_too_long_to_stage_is_named_before_any_work(work, failing, monkeypatch):
    from deamoe.analysis import table1

    def work_started(*_, **__):
        raise AssertionError("the work started before the output was checked")

    monkeypatch.setattr(table1, "table1", work_started)
    name = "x" * 242 + ".csv"  # 246 bytes: a legal name, 256 with the staging folder's 10
    failing([*TABLE1, name], repr(str(name)), "too long", "255-byte limit")


def test_the_longest_name_that_can_be_staged_is_written(work, capsys):
    name = "x" * 241 + ".csv"  # 245 bytes, 255 with the staging folder's 10
    status, err = run_cli([*TABLE1, name], capsys)
    assert status == 0, err
    assert (work / name).is_file()
    assert sorted(p.name for p in work.iterdir()) == [".deamoe-output", name]  # no staging left


@pytest.mark.parametrize("kind", ["fifo", "devnull", "dangling", "loop"])
def test_no_output_is_written_through_a_pipe_a_device_or_a_link(work, failing, kind):
    if kind == "fifo":  # beside the working folder: the tree's hash would wait on a pipe in it
        out = work.parent / "out.csv"
        os.mkfifo(out)
    elif kind == "devnull":
        out = Path(os.devnull)
    else:
        (work / "out.csv").symlink_to(work / ("out.csv" if kind == "loop" else "gone.csv"))
        out = work / "out.csv"
    failing([*TABLE1, out], str(out))
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert not (work / "gone.csv").exists()
