"""The environment a command starts in: variables it reads, and the checkout it runs from.

A bad value in a variable that torchrun or SLURM sets (RANK, WORLD_SIZE, LOCAL_RANK, SLURM_NTASKS,
SLURM_JOB_ID) failed "unexpectedly" with an int() error that named no variable; now one line
names it.  A copy of the project without .git placed inside another git repository recorded that
repository's commit as the git sha of its numbers; now 'unknown', as any copy without .git.
"""

from __future__ import annotations

import subprocess

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


def _git(where, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=where,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def provenance(monkeypatch):
    from deamoe import provenance

    monkeypatch.delenv("DEAMOE_GIT_SHA", raising=False)
    provenance.git_sha.cache_clear()
    yield provenance
    provenance.git_sha.cache_clear()


def test_a_copy_inside_another_repository_is_not_that_repositorys_commit(tmp_path, provenance):
    outer = tmp_path / "home"
    (outer / "kept").mkdir(parents=True)
    (outer / "kept" / "notes.txt").write_text("tracked by the outer repository\n")
    _git(outer, "init", "-q")
    _git(outer, "add", "kept")
    _git(outer, "commit", "-qm", "home")
    copy = outer / "deamoe-copy" / "src" / "deamoe"  # unpacked from an archive: no .git of its own
    copy.mkdir(parents=True)
    (copy / "provenance.py").write_text("# the package\n")
    assert provenance.git_sha(copy) == "unknown"
    assert provenance.git_sha(outer / "kept") == _git(outer, "rev-parse", "--short=12", "HEAD")


def test_without_git_on_the_path_the_sha_is_unknown(tmp_path, provenance, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git there
    assert provenance.git_sha(tmp_path) == "unknown"
    assert provenance.row_sha("0123456789ab", tmp_path) == "0123456789ab"
