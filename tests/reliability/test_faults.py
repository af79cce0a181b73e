"""Faults: two commands never write one folder at once, a stopped command leaves no staging
folder (or the next run removes the ones it owns, and only those), SIGTERM unwinds a training
run, which then resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_battery import run_cli, train_config, write_config

HOLD = """
import sys, time
from deamoe import io
with getattr(io, sys.argv[1])(sys.argv[2]):
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(cwd, lock: str, path: str) -> subprocess.Popen:
    """A process holding io.<lock>(path) (folder_lock or output_lock) until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, lock, path], cwd=cwd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("argv, lock, folder", [
    (["data", "--config", "c.yaml", "--out", "d"], "folder_lock", "d"),
    (["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e"], "folder_lock", "e"),
    (["eval-tables", "--config", "c.yaml", "--in", "ck", "--out", "et"], "folder_lock", "et"),
    (["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv"], "output_lock", "sv"),
    (["serve-tables", "--config", "c.yaml", "--in", "ck", "--out", "st"], "folder_lock", "st"),
    (["microbench", "--config", "c.yaml", "--out", "mb"], "folder_lock", "mb"),
    (["report", "--config", "c.yaml", "--results", "ck", "--measured", "ck", "--out", "rep"], "folder_lock", "rep"),
    (["pretrain", "--config", "c.yaml", "--runs", "ck", "--out", "q/runs.csv"], "folder_lock", "q"),
])
def test_a_second_writer_of_a_folder_stops_naming_the_first(work, failing, argv, lock, folder):
    write_config(work / "c.yaml")
    (work / "ck").mkdir()
    holder = _holder(work, lock, folder)
    try:
        failing(argv, folder, "is in use by", f"PID {holder.pid}")
    finally:
        _kill(holder)


STAGE = """
import sys, time
from deamoe.io import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("half")
    print("writing", flush=True)
    time.sleep(120)
"""


def _writer(cwd, path: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", STAGE, path], cwd=cwd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    return proc


def _staging(folder, name):
    return sorted(p.name for p in folder.glob(f".{name}.*") if p.is_dir())


def test_the_staging_folder_of_a_killed_write_is_removed_by_the_next(work, capsys):
    _kill(_writer(work, "t.csv"))  # kill -9: no finally block ran
    assert len(_staging(work, "t.csv")) == 1
    status, err = run_cli(["table1", "--models", "Baseline-7B", "--out", "t.csv"], capsys)
    assert status == 0, err
    assert _staging(work, "t.csv") == []


def test_a_live_writers_staging_folder_is_left_alone(work, capsys):
    writer = _writer(work, "t.csv")
    try:
        status, err = run_cli(["table1", "--models", "Baseline-7B", "--out", "t.csv"], capsys)
        assert status == 0, err
        assert len(_staging(work, "t.csv")) == 1  # still in use
    finally:
        _kill(writer)


def test_a_folder_named_like_staging_without_the_mark_is_never_removed(work, capsys):
    (work / ".t.csv.mine").mkdir()
    (work / ".t.csv.mine" / "notes.txt").write_text("the user's")
    status, err = run_cli(["table1", "--models", "Baseline-7B", "--out", "t.csv"], capsys)
    assert status == 0, err
    assert (work / ".t.csv.mine" / "notes.txt").read_text() == "the user's"


def test_a_stop_while_the_staging_folder_is_being_made_leaves_nothing(work, monkeypatch):
    # Ctrl-C / SIGTERM raised as the staging folder's mark is put in place (the moment a
    # training run's SIGTERM once hit): the folder goes, though its mark is not yet the one a
    # later run would clear
    from deamoe import io

    real = os.replace

    def interrupted(src, dst):
        if Path(src).name == ".mark":
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(io.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with io.atomic_path(work / "t.csv"):
            pass
    assert list(work.glob(".t.csv.*")) == []


def test_a_training_run_clears_its_killed_checkpoint_staging_at_start(work, shards, capsys):
    train_config(work / "c.yaml", shards)
    run_cli(["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", str(shards / "data"),
             "--out", "run", "--steps", "3"], capsys)
    _kill(_writer(work, "run/state/resume.pt"))
    assert len(_staging(work / "run" / "state", "resume.pt")) == 1
    status, err = run_cli(["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data",
                           str(shards / "data"), "--out", "run", "--steps", "3"], capsys)
    assert status == 0, err
    assert _staging(work / "run" / "state", "resume.pt") == []


def test_sigterm_stops_a_training_run_cleanly_and_the_rerun_resumes(work, shards, capsys):
    train_config(work / "c.yaml", shards, steps=60, checkpoint_every=2)
    argv = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", str(shards / "data"), "--out", "run"]
    proc = subprocess.Popen([sys.executable, "-m", "deamoe", *argv], cwd=work, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (work / "run" / "state" / "resume.pt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 143 and "terminated: python -m deamoe train" in err, err[-2000:]
    left = [p for p in (work / "run").rglob(".*") if p.name not in (".deamoe-output",)]
    assert left == [], left  # no staging folder, no lock
    assert (work / "run" / "state" / "resume.pt").is_file()
    status, err = run_cli(argv, capsys)
    assert status == 0 and "resumed from step" in err, err


# Ctrl-C lands while the interpreter shuts down, after the command has finished (an atexit
# callback stands in for the moment): before, a KeyboardInterrupt traceback from that callback
TEARDOWN = """
import atexit, os, runpy, signal, sys
atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))
sys.argv = ["deamoe", *sys.argv[1:]]
runpy.run_module("deamoe", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_the_interpreter_shuts_down_prints_no_traceback(tmp_path):
    argv = ["budget", "--h", "8", "--h-ffn", "4", "--n-expert", "8", "--k-expert", "2", "--n-dept", "2",
            "--dea-n-expert", "8", "--k-dept", "1", "--dea-k-expert", "2"]
    done = subprocess.run([sys.executable, "-c", TEARDOWN, *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert '"params_ratio"' in done.stdout  # the command's work was done
    assert "Traceback" not in done.stderr and done.stderr.strip() == "", done.stderr
    assert done.returncode == -signal.SIGINT  # ended by the signal, as its default action


@pytest.mark.parametrize("argv", [
    ["budget", "--h", "8", "--h-ffn", "4", "--n-expert", "8", "--k-expert", "2", "--n-dept", "2",
     "--dea-n-expert", "8", "--k-dept", "1", "--dea-k-expert", "2"],
    ["--help"],
    ["bench", "--help"],
])
@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_reader_that_closed_stdout_is_no_fault(tmp_path, argv, unbuffered):
    """`python -m deamoe ... | head -1`: the reader gone before the output was written was reported
    as a fault of the program (BrokenPipeError, exit status 1), or, the output buffered, as a
    Python warning with exit status 120.  Now: quiet, the status a shell gives SIGPIPE (or 0:
    argparse drops a failed write of --help's text that nothing buffered)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-m", "deamoe", *argv], cwd=tmp_path, stdout=write,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          env={**env, **({"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})})
    os.close(write)
    assert done.stderr == "" and done.returncode in (0, 141), done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["--help"], ["report", "--help"]])
def test_help_to_a_full_disk_is_one_line(tmp_path, argv):
    """`--help > /dev/full`: argparse dropped the failed write and exited 0, as if the text had
    arrived; now one line on stderr and exit status 2."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "deamoe", *argv], cwd=tmp_path, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(": error: could not write to stdout (No space left on device)\n")
    assert len(done.stderr.splitlines()) == 1, done.stderr
