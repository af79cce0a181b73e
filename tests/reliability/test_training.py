"""One trainer per run folder; a resumed run says so; a changed setting names the folder to delete."""

from __future__ import annotations

import signal
import subprocess
import sys

from cli_battery import assert_one_line_error, run_cli, train_config as _config, tree


def _stopped_run(work, shards):
    """A run interrupted after step 3 (its resume state written), as a kill would leave it."""
    from deamoe.train.runs import run_spec
    from deamoe.settings import load_settings
    from deamoe.train.trainer import train_run

    s = load_settings(_config(work / "c.yaml", shards))
    assert train_run(s, run_spec(s, "ablation-no1-s0"), shards / "data", work / "run", stop_after=3,
                     progress=False) is None
    assert (work / "run" / "state" / "resume.pt").is_file()


TRAIN = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "DATA", "--out", "run"]


def _argv(shards):
    return [str(shards / "data") if a == "DATA" else a for a in TRAIN]


def test_a_resumed_run_logs_its_step_and_checkpoint(work, shards, capsys):
    _stopped_run(work, shards)
    status, err = run_cli(_argv(shards), capsys)
    assert status == 0, err
    assert f"resumed from step 3 (checkpoint run/state/resume.pt)" in err
    assert not (work / "run" / "train.lock").exists()  # the lock goes with the run


def test_changed_settings_name_the_folder_to_delete(work, shards, capsys):
    _stopped_run(work, shards)
    _config(work / "c.yaml", shards, lr=0.01)
    before = tree(work)
    status, err = run_cli(_argv(shards), capsys)
    assert_one_line_error(status, err, "run/state/resume.pt", "differs in: train",
                          "delete the folder run/state")
    assert tree(work) == before


def test_a_second_trainer_on_one_folder_stops_naming_the_first(work, shards, capsys):
    _config(work / "c.yaml", shards)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from deamoe.io import folder_lock\n"
         "with folder_lock('run', 'train.lock'):\n print('held', flush=True); time.sleep(60)"],
        cwd=work, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = tree(work)
        status, err = run_cli(_argv(shards), capsys)
        assert_one_line_error(status, err, "run is in use by another trainer", f"PID {holder.pid}")
        assert tree(work) == before
    finally:
        holder.send_signal(signal.SIGKILL)  # kill -9: the lock dies with it
        holder.wait()
    status, err = run_cli(_argv(shards), capsys)
    assert status == 0, err
    assert (work / "run" / "checkpoint" / "config.json").is_file()
