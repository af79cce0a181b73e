"""The environment a command starts in: variables it reads, and the checkout it runs from.

A bad value in a variable that torchrun or SLURM sets (RANK, WORLD_SIZE, LOCAL_RANK, SLURM_NTASKS,
SLURM_JOB_ID) failed "unexpectedly" with an int() error that named no variable; now one line
names it.
"""

from __future__ import annotations

import pytest

from cli_battery import train_config

TRAIN = ["train", "--config", "c.yaml", "--run", "ablation-no1-s0", "--data", "DATA", "--out", "run"]


@pytest.mark.parametrize("env, name", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
    ({"RANK": "0", "WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1.5"}, "LOCAL_RANK='1.5'"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "many"}, "SLURM_NTASKS='many'"),
])
def test_a_bad_launcher_variable_is_named_before_any_work(work, failing, shards, monkeypatch, env, name):
    train_config(work / "c.yaml", shards)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = [str(shards / "data") if a == "DATA" else a for a in TRAIN]
    err = failing(argv, "environment variable", name)
    assert "unexpectedly" not in err


def test_a_slurm_job_id_that_is_no_number_is_named():
    from deamoe.errors import ConfigError
    from deamoe.train.parallel import torchrun_args

    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert "--rdzv-id=deamoe-77" in torchrun_args(4, {**env, "SLURM_JOB_ID": "77"})
    with pytest.raises(ConfigError, match="SLURM_JOB_ID='7x' is not a whole number"):
        torchrun_args(4, {**env, "SLURM_JOB_ID": "7x"})
