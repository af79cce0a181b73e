"""Tables of a GPU training measurement (reports/measured/h200/train_*.csv).

`python -m deamoe.train.measure RUNS_DIR OUT_DIR` reads finished run directories and writes
  train_gpu.csv     one row per run: throughput, MFU vs the measured 794 TFLOP/s dense bf16 rate,
                    first/last loss, held-out loss, DeaMoE / baseline step-time ratio
  train_fsdp.csv    per step: loss of the one-GPU run vs the FSDP2 two-GPU run (same batches)
  train_curves.csv  loss curves (every 10th step) of the time-boxed runs
A missing or malformed input, or an output the project did not write, is one line on stderr
(exit status 2), named before anything is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

OUTPUTS = ("train_gpu.csv", "train_curves.csv", "train_fsdp.csv")


def collect(runs: Path, out: Path) -> None:
    import pandas as pd

    from deamoe.errors import DataError
    from deamoe.io import check_outputs, write_csvs
    from deamoe.readers import input_folder, read_json, read_training_log

    input_folder(runs, "the finished runs' folder")
    check_outputs(files=[out / name for name in OUTPUTS])
    rows, curves = [], []
    done = sorted(p for p in runs.iterdir() if (p / "summary.json").is_file())
    if not done:
        raise DataError(f"{runs}: no run folder holding a summary.json")
    for run in done:
        s = read_json(run / "summary.json", "run summary")
        log = read_training_log(run / "log.csv")
        steady = log.iloc[min(10, len(log) - 1):]
        try:
            rows.append(_row(run, s, log, steady))
        except KeyError as exc:
            raise DataError(f"{run / 'summary.json'}: no key {exc.args[0]!r} (or its log.csv no "
                            "such column)") from None
        except (TypeError, ValueError) as exc:
            raise DataError(f"{run / 'summary.json'}: a value of the wrong type ({exc})") from None
        curves.append(log[log["step"] % 10 == 0][["step", "tokens", "loss"]].assign(run_dir=run.name))
    table = pd.DataFrame(rows)
    single = table[table["world_size"] == 1].sort_values("steps").drop_duplicates("run", keep="last")
    pre = single[single["run"].str.startswith("pretrain-")]
    times = dict(zip(pre["ffn_type"], pre["median_step_time_s"]))  # the pair: moe and deamoe
    if {"moe", "deamoe"} <= set(times):
        table["deamoe_over_baseline_step_time"] = times["deamoe"] / times["moe"]
    tables = {"train_gpu.csv": table, "train_curves.csv": pd.concat(curves)}
    pair = [runs / n for n in ("one40", "two40")]
    if all((p / "log.csv").is_file() for p in pair):
        a, b = (read_training_log(p / "log.csv") for p in pair)
        lacking = next((f"{p / 'log.csv'}: missing column {c} of the FSDP comparison" for p, log in
                        zip(pair, (a, b)) for c in ("grad_norm", "tokens_per_s") if c not in log), None)
        if lacking:
            raise DataError(lacking)
        tables["train_fsdp.csv"] = pd.DataFrame({
            "step": a["step"], "loss_1gpu": a["loss"], "loss_fsdp2_2gpu": b["loss"],
            "abs_diff": (a["loss"] - b["loss"]).abs(),
            "grad_norm_1gpu": a["grad_norm"], "grad_norm_fsdp2_2gpu": b["grad_norm"],
            "tokens_per_s_1gpu": a["tokens_per_s"], "tokens_per_s_fsdp2_2gpu": b["tokens_per_s"]})
    # every input read before the first table is written, and the tables published together: a
    # malformed FSDP log (or a stop) left the first two tables new beside an old third one
    write_csvs({out / name: frame for name, frame in tables.items()})
    print(table.to_string(index=False))


def _row(run: Path, s: dict, log, steady) -> dict:
    return {
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
    }


def main(argv: list[str]) -> int:
    from deamoe.errors import asked_for_help, run_reporting

    usage = "usage: python -m deamoe.train.measure RUNS_DIR OUT_DIR"
    if asked_for_help(argv, usage):
        return 0
    if len(argv) != 2:
        print(usage, file=sys.stderr)
        return 2
    return run_reporting(collect, Path(argv[0]), Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
