"""Processes and devices: one process, or torchrun + FSDP2 (`fully_shard`) over several.

`python -m deamoe train` with train.nproc_per_node > 1 re-launches itself under
`torch.distributed.run` (one process per GPU with NCCL; on the CPU, gloo processes, which CI
uses).  On several nodes, SLURM starts one copy of the command per node
(`srun --ntasks-per-node=1 python -m deamoe train ...`); each copy runs torchrun with
train.nproc_per_node processes, and the copies meet in a c10d rendezvous on the first node of the
step (`torchrun_args`).  A command started with RANK and WORLD_SIZE already set (under torchrun)
is not re-launched.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from deamoe.errors import ConfigError


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    device: "object"  # torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def resolve_device(name: str):
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda but no CUDA GPU is visible")
    return name


def check_gpus(device: str, nproc: int) -> None:
    import torch

    if device == "cuda" and nproc > torch.cuda.device_count():
        raise ConfigError(
            f"train.nproc_per_node={nproc} asks for {nproc} GPUs but {torch.cuda.device_count()} exist"
        )
    if device == "cpu" and nproc > (os.cpu_count() or 1):  # each gloo rank is a whole torch process
        raise ConfigError(f"train.nproc_per_node={nproc} asks for {nproc} CPU processes but this machine "
                          f"has {os.cpu_count()} cores")


def env_int(name: str, env=os.environ, default: int = 0) -> int:
    """The whole number in the environment variable `name` (set by torchrun or SLURM), `default`
    where it is unset or empty; another value is named, not an int() error naming no variable."""
    value = env.get(name, "")
    if not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not a whole number (torchrun and "
                          "SLURM set it; unset it outside them)") from None


def slurm_launchers(env=os.environ) -> int:
    """How many copies of this command SLURM started in this job step (one per node); 1 outside
    SLURM and under the one-task step that runs each Snakemake job."""
    if "SLURM_PROCID" not in env:
        return 1
    return env_int("SLURM_STEP_NUM_TASKS", env) or env_int("SLURM_NTASKS", env) or 1


def first_host(nodelist: str) -> str:
    """The first host of a SLURM hostlist: 'gpu[07-09,12],cpu1' -> 'gpu07' (zero padding kept)."""
    head = nodelist.strip()
    depth, cut = 0, len(head)
    for i, ch in enumerate(head):  # the first comma outside brackets ends the first entry
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            cut = i
            break
    head = head[:cut]
    if "[" not in head:
        return head
    prefix, rest = head.split("[", 1)
    ranges, suffix = rest.split("]", 1)
    return prefix + ranges.split(",")[0].split("-")[0] + (first_host(suffix) if suffix else "")


def torchrun_args(nproc: int, env=os.environ) -> list[str]:
    """torchrun's node arguments.  One launcher: `--standalone` (a private rendezvous on this
    node).  Several launchers started by SLURM (one per node): all of them rendezvous (c10d) at the
    first node of the step, on a port derived from the job id so two jobs sharing a node do not
    meet; torchrun numbers the nodes itself, so no node rank is passed."""
    n = slurm_launchers(env)
    if n <= 1:
        return ["--standalone", f"--nproc-per-node={nproc}"]
    job = env_int("SLURM_JOB_ID", env)
    host = first_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "localhost")
    port = 29500 + job % 20000
    return [f"--nnodes={n}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={host}:{port}", f"--rdzv-id=deamoe-{job}"]


def launch(nproc: int, argv: list[str]) -> int:
    """Run `python -m deamoe <argv>` under torchrun with nproc processes on this node (and, when
    SLURM started one launcher per node, together with the other nodes' launchers)."""
    from torch.distributed.run import get_args_parser, run

    # NVLink multicast stays off (shared hosts); harmless elsewhere.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    args = get_args_parser().parse_args([*torchrun_args(nproc), "-m", "deamoe"])
    # Set the script's arguments after parsing: torchrun's parser would take `--run` for its
    # own `--run-path` (argparse prefix matching).
    args.training_script_args = list(argv)
    try:
        run(args)
    except Exception as exc:  # ChildFailedError: the ranks' own errors were already printed
        print(f"error: torchrun with {nproc} processes failed: {type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


def setup(device_name: str) -> Dist:
    """Initialise the process group when under torchrun; pick this process's device."""
    import torch
    import torch.distributed as dist

    device = resolve_device(device_name)
    if not under_torchrun() or env_int("WORLD_SIZE") == 1:
        return Dist(0, 1, 0, torch.device(device))
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    local = env_int("LOCAL_RANK")
    if device == "cuda":
        check_gpus(device, local + 1)
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device == "cuda" else "gloo", device_id=dev if device == "cuda" else None)
    return Dist(rank, world, local, dev)


def teardown(d: Dist) -> None:
    import torch.distributed as dist

    if d.world > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def shard(model, bf16: bool = False) -> None:
    """FSDP2: shard every decoder layer, then the root (embeddings, final norm, head).

    The sharded parameters and the optimiser state stay float32 (the master weights).  bf16:
    FSDP2's MixedPrecisionPolicy gathers them as bf16 once per forward (one cast per layer per
    step instead of autocast's per-use casts) and reduces gradients in float32.  Without it,
    parameters are used in float32 under autocast, as in the one-process run.
    """
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)


def all_mean(values: list[float], d: Dist) -> list[float]:
    """Mean over ranks of a few floats (one collective)."""
    if d.world == 1:
        return values
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(t)
    return (t / d.world).tolist()


def all_mean_tensor(values, d: Dist):
    """Mean over ranks of a device tensor, left on the device (no host sync)."""
    if d.world == 1:
        return values
    import torch.distributed as dist

    values = values.clone()
    dist.all_reduce(values)
    return values / d.world


def sync_buffers(model, d: Dist) -> None:
    """Average the expert-bias buffers over ranks (load_balance='bias' updates them locally)."""
    if d.world == 1:
        return
    import torch.distributed as dist

    for layer in model.model.layers:
        buf = layer.mlp.expert_bias
        dist.all_reduce(buf)
        buf.div_(d.world)
