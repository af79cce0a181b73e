"""torchrun's node arguments: one node alone, or one launcher per node started by SLURM."""

import pytest

from deamoe.train.parallel import first_host, slurm_launchers, torchrun_args


@pytest.mark.parametrize("nodelist, host", [
    ("vm", "vm"),
    ("a,b", "a"),
    ("gpu[07-09,12],cpu1", "gpu07"),
    ("rack[1-2]-node[01-04]", "rack1-node01"),
    ("n[3]", "n3"),
    ("x-[10-11].ib,y", "x-10.ib"),
])
def test_first_host_of_a_slurm_hostlist(nodelist, host):
    assert first_host(nodelist) == host


def test_one_launcher_is_a_standalone_node():
    assert torchrun_args(2, {}) == ["--standalone", "--nproc-per-node=2"]
    # the one-task step that runs each Snakemake job under the SLURM executor
    step = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_JOB_ID": "7"}
    assert slurm_launchers(step) == 1
    assert torchrun_args(8, step) == ["--standalone", "--nproc-per-node=8"]


def test_one_launcher_per_node_meets_at_the_first_node_of_the_step():
    env = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_JOB_ID": "123456",
           "SLURM_STEP_NODELIST": "gpu[07-10]", "SLURM_JOB_NODELIST": "gpu[01-10]"}
    assert slurm_launchers(env) == 4
    assert torchrun_args(8, env) == [
        "--nnodes=4", "--nproc-per-node=8", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=gpu07:{29500 + 123456 % 20000}", "--rdzv-id=deamoe-123456"]
    # a batch script's environment (no step yet): not a launcher of a multi-node step
    assert slurm_launchers({"SLURM_JOB_ID": "5", "SLURM_NTASKS": "4"}) == 1
