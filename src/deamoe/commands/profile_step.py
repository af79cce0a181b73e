"""Where a training step's GPU time goes: torch.profiler over a few steps of one run.

`python -m deamoe.commands.profile_step CONFIG RUN DATA OUT.csv [steps]` builds the run's model as
the trainer does (bf16 autocast, AdamW), warms up, profiles `steps` steps and writes the top
operators by self CUDA time (name, calls, self_cuda_ms per step, share of the step).
"""

from __future__ import annotations

import sys
import time


def profile(config: str, run: str, data_dir: str, out_csv: str, steps: int = 5) -> None:
    import pandas as pd
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile

    from deamoe.io import check_outputs, write_csv
    from deamoe.model import DeaMoEForCausalLM
    from deamoe.train.data import TokenData
    from deamoe.train.runs import model_config, run_spec
    from deamoe.settings import load_settings
    from deamoe.train.trainer import build_optimizer, micro_loss

    check_outputs(files=[out_csv])  # a file deamoe did not write is never replaced
    s = load_settings(config)
    t = s.train
    data = TokenData.open(data_dir)
    cfg = model_config(s, run_spec(s, run), data.meta["vocab_size"])
    if not torch.cuda.is_available():
        from deamoe.errors import DeaMoEError

        raise DeaMoEError("python -m deamoe.commands.profile_step: needs a CUDA GPU")
    torch.manual_seed(t.seed)
    torch.set_float32_matmul_precision("high")
    model = DeaMoEForCausalLM(cfg).cuda().train()
    opt = build_optimizer(model, t)
    accum = t.batch_size // t.micro_batch_size

    def step(i):
        for a in range(accum):
            lo = a * t.micro_batch_size
            x, y = data.train_batch(i, t.seed, t.batch_size, t.seq_len, slice(lo, lo + t.micro_batch_size))
            with torch.autocast("cuda", dtype=torch.bfloat16):
                ce, aux = micro_loss(model, x.cuda(), y.cuda(), cfg)
                ((ce + cfg.aux_loss_coef * aux) / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(5):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(5, 5 + steps):
            step(i)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    gpu_total = sum(e.self_device_time_total for e in events) / steps / 1e3  # ms per step
    rows = sorted(
        ({"op": e.key[:80], "calls_per_step": e.count / steps,
          "self_cuda_ms_per_step": e.self_device_time_total / steps / 1e3} for e in events),
        key=lambda r: -r["self_cuda_ms_per_step"])[:25]
    table = pd.DataFrame(rows)
    table["share_of_gpu_time"] = table["self_cuda_ms_per_step"] / gpu_total
    table = table.assign(run=run, step_wall_ms=wall * 1e3, gpu_busy_ms=gpu_total)
    write_csv(out_csv, table)
    print(f"{run}: step {wall * 1e3:.1f} ms wall, GPU busy {gpu_total:.1f} ms")
    print(table.head(12).to_string(index=False))


def main(a: list[str]) -> int:
    from deamoe.errors import asked_for_help, run_reporting

    usage = "usage: python -m deamoe.commands.profile_step CONFIG RUN DATA OUT.csv [STEPS >= 1]"
    if asked_for_help(a, usage):
        return 0
    if len(a) not in (4, 5) or (len(a) == 5 and not (a[4].isdigit() and int(a[4]) > 0)):
        print(usage, file=sys.stderr)
        return 2
    return run_reporting(profile, a[0], a[1], a[2], a[3], int(a[4]) if len(a) > 4 else 5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
