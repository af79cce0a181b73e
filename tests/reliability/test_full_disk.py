"""A file system that fills while a command writes: one line naming what was being written, and
the outputs as they were (every old one or none), never a half-published set.  The full disk is
simulated (a write raising ENOSPC, or /dev/full), so the cases run without a small file system."""

from __future__ import annotations

import errno
import os

import pytest

from cli_battery import run_cli, train_config, tree


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("earlier", [True, False], ids=["over earlier data", "into a new folder"])
def test_data_whose_disk_fills_as_it_publishes_leaves_the_earlier_data_or_none(work, shards, capsys, monkeypatch,
                                                                               earlier):
    """The shards were moved in one by one, each with its marker written just before: a disk that
    filled at the tokenizer's marker left the new train.bin and val.bin beside the old meta.json
    (or alone, in a new folder), saying 'nothing of it kept'."""
    import deamoe.io

    train_config(work / "c.yaml", shards)
    if earlier:
        assert run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)[0] == 0
        # other shards this time (the same config writes the same bytes: a mix would not show)
        (work / "c.yaml").write_text((work / "c.yaml").read_text().replace("vocab_size: 300", "vocab_size: 280"))
    before = tree(work)
    monkeypatch.setattr(deamoe.io, "mark_whole", _full)  # the tokenizer folder's list of its files
    status, err = run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert status == 2 and "Traceback" not in err and len(lines) == 1 and "No space left on device" in lines[0], err
    assert tree(work) == before  # the earlier shards, tokenizer and meta.json, byte for byte; or no d/


def test_a_lock_file_the_full_disk_cannot_hold_is_named(work, failing, shards, monkeypatch):
    """It was 'the file system filled while it wrote', naming neither the folder nor the file."""
    import deamoe.locks

    train_config(work / "c.yaml", shards)
    monkeypatch.setattr(deamoe.locks.os, "pwrite", _full)
    failing(["data", "--config", "c.yaml", "--out", "d"], "d/.deamoe.lock: No space left on device",
            "lock file")


def test_a_resume_state_the_full_disk_cannot_hold_is_named(work, capsys, shards, monkeypatch):
    """torch.save given a path writes through its own C++ writer, whose full disk reads
    'unexpected pos 64 vs 0': a fault of the program (exit status 1), naming no file."""
    import builtins

    import deamoe.train.trainer as trainer

    def full_open(path, mode="r", *args, **kwargs):
        return builtins.open(os.devnull if "w" not in mode else "/dev/full", mode, *args, **kwargs)

    train_config(work / "c.yaml", shards)
    monkeypatch.setattr(trainer, "open", full_open, raising=False)
    status, err = run_cli(["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", shards / "data",
                           "--out", "run"], capsys)
    lines = [line for line in err.splitlines() if "error:" in line]  # (after the steps' progress bar)
    assert status == 2 and "Traceback" not in err and len(lines) == 1, err
    assert "error: run/state/resume.pt: No space left on device" in lines[0], err
    assert not list((work / "run" / "state").glob(".*")), "a staging folder was left"
