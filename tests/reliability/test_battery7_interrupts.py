"""A stop at any moment of a command is one line, and a rebuild gives the same files.

Ctrl-C or SIGTERM while `python -m deamoe` loads its stage modules (before the command runs;
seconds where torch is imported), or while it imports the dispatcher, printed a KeyboardInterrupt
traceback, or SIGTERM ended the process without a word.  A figure's SVG carried the time it was drawn and random element ids, so
a report rebuilt from the same results differed from the first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cli_battery import run_cli


@pytest.mark.parametrize("stop, status, word", [(KeyboardInterrupt, 130, "interrupted"),
                                                ("Terminated", 143, "terminated")])
def test_a_stop_while_the_commands_load_is_one_line(work, capsys, monkeypatch, stop, status, word):
    from deamoe import cli

    stop = getattr(cli, stop) if isinstance(stop, str) else stop

    def loading():
        raise stop()

    monkeypatch.setattr(cli, "build_parser", loading)
    got, err = run_cli(["table1", "--out", "t.csv"], capsys)
    assert got == status and err == f"{word}: python -m deamoe\n", err
    assert list(work.iterdir()) == []


def test_sigterm_while_the_commands_load_unwinds_as_a_stop(work, capsys, monkeypatch):
    """The handler that turns SIGTERM into a stop is in place before the stage modules load."""
    from deamoe import cli

    def loading():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the signal is handled before this ends
        raise AssertionError("SIGTERM was not handled")

    monkeypatch.setattr(cli, "build_parser", loading)
    before = signal.getsignal(signal.SIGTERM)
    got, err = run_cli(["table1", "--out", "t.csv"], capsys)
    assert got == 143 and err == "terminated: python -m deamoe\n", err
    assert signal.getsignal(signal.SIGTERM) is before  # given back as it was


# Ctrl-C while `python -m deamoe` imports its dispatcher (an import hook stands in for the moment)
LOADING = """
import runpy, sys
class Stop:
    def find_spec(self, name, path=None, target=None):
        if name == "deamoe.cli":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Stop())
sys.argv = ["deamoe", *sys.argv[1:]]
runpy.run_module("deamoe", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_the_dispatcher_loads_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-c", LOADING, "table1", "--out", "t.csv"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.stderr == "interrupted: python -m deamoe\n" and done.returncode == 130, done.stderr
    assert list(tmp_path.iterdir()) == []


def _figure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2, 3], [3, 1, 2], label="a")
    ax.fill_between([1, 2], 0, 1)
    ax.legend()
    return fig


def test_a_rebuilt_figure_has_the_same_bytes(tmp_path):
    """A rerun of the report (after a stop, or on the same results) gives the same figure files."""
    from deamoe.report.figures import _save

    first = _save(_figure(), tmp_path / "a", "f", dpi=50)
    time.sleep(1.1)  # a second later: a drawn date would differ
    second = _save(_figure(), tmp_path / "b", "f", dpi=50)
    assert [p.name for p in first] == ["f.png", "f.svg"]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert b"<dc:date>" not in first[1].read_bytes()


class _StoppedMidWrite:
    """The file torch.save writes the resume state into, sending SIGTERM to this process on its
    third write: the stop lands inside torch's own call to write."""

    def __init__(self, f):
        self.f, self.writes = f, 0

    def write(self, data):
        self.writes += 1
        if self.writes == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_sigterm_while_the_resume_state_is_written_stops_cleanly(work, shards, capsys, monkeypatch):
    """Raised inside torch's writer, the stop read as RuntimeError "unexpected pos" (a fault of the
    program, exit status 1); now the state is written, then the run stops as after any SIGTERM."""
    import torch

    from cli_battery import train_config

    train_config(work / "c.yaml", shards, steps=6, checkpoint_every=2)
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: real(obj, _StoppedMidWrite(f), *a, **k))
    argv = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", str(shards / "data"), "--out", "run"]
    status, err = run_cli(argv, capsys)
    assert status == 143 and "terminated: python -m deamoe train\n" in err and "unexpected" not in err, err
    assert torch.load(work / "run" / "state" / "resume.pt", weights_only=False)["step"] == 2
    assert [p.name for p in (work / "run").rglob(".*") if p.name != ".deamoe-output"] == []
    monkeypatch.setattr(torch, "save", real)
    status, err = run_cli(argv, capsys)
    assert status == 0 and "resumed from step 2" in err, err
