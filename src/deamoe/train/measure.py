"""Tables of a GPU training measurement (reports/measured/h200/train_*.csv).

`python -m deamoe.train.measure RUNS_DIR OUT_DIR` reads finished run directories and writes
  train_gpu.csv     one row per run: throughput, MFU vs the measured 794 TFLOP/s dense bf16 rate,
                    first/last loss, held-out loss, DeaMoE / baseline step-time ratio
  train_fsdp.csv    per step: loss of the one-GPU run vs the FSDP2 two-GPU run (same batches)
  train_curves.csv  loss curves (every 10th step) of the time-boxed runs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def collect(runs: Path, out: Path) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], []
    for run in sorted(p for p in runs.iterdir() if (p / "summary.json").is_file()):
        s = json.loads((run / "summary.json").read_text())
        log = pd.read_csv(run / "log.csv")
        steady = log.iloc[min(10, len(log) - 1):]
        rows.append({
            "run_dir": run.name, "run": s["run"], "ffn_type": s["ffn_type"], "world_size": s["world_size"],
            "params": s["params"], "steps": s["steps"], "planned_steps": s.get("planned_steps"),
            "tokens": s["tokens"], "tokens_per_s": round(s["tokens_per_s"]),
            "median_step_time_s": float(steady["step_time_s"].median()),
            "train_flops_per_token": s["train_flops_per_token"],
            "mfu_vs_794tflops": s["mfu_vs_794tflops"],
            "first_loss": float(log["loss"].iloc[0]), "final_loss": float(log["loss"].iloc[-1]),
            "loss_last_100": float(log["loss"].tail(100).mean()), "val_loss": s["val_loss"],
            "mean_distinct_departments": s.get("mean_distinct_departments"),
            "device": s["device"], "torch": s["torch"], "git_sha": s["git_sha"], "date": s["date"],
        })
        curves.append(log[log["step"] % 10 == 0][["step", "tokens", "loss"]].assign(run_dir=run.name))
    table = pd.DataFrame(rows)
    single = table[table["world_size"] == 1].sort_values("steps").drop_duplicates("run", keep="last")
    pre = single[single["run"].str.startswith("pretrain-")]
    times = dict(zip(pre["ffn_type"], pre["median_step_time_s"]))  # the pair: moe and deamoe
    if {"moe", "deamoe"} <= set(times):
        table["deamoe_over_baseline_step_time"] = times["deamoe"] / times["moe"]
    table.to_csv(out / "train_gpu.csv", index=False)
    pd.concat(curves).to_csv(out / "train_curves.csv", index=False)
    pair = [runs / n for n in ("one40", "two40")]
    if all((p / "log.csv").is_file() for p in pair):
        a, b = (pd.read_csv(p / "log.csv") for p in pair)
        fsdp = pd.DataFrame({"step": a["step"], "loss_1gpu": a["loss"], "loss_fsdp2_2gpu": b["loss"],
                             "abs_diff": (a["loss"] - b["loss"]).abs(),
                             "grad_norm_1gpu": a["grad_norm"], "grad_norm_fsdp2_2gpu": b["grad_norm"],
                             "tokens_per_s_1gpu": a["tokens_per_s"], "tokens_per_s_fsdp2_2gpu": b["tokens_per_s"]})
        fsdp.to_csv(out / "train_fsdp.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    collect(Path(sys.argv[1]), Path(sys.argv[2]))
