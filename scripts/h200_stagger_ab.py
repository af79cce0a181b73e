"""A/B of the staggered department up-projection (NOTES.md v15) on the H200.

usage: python scripts/h200_stagger_ab.py OUT_DIR [MODEL:BATCH ...]   (CUDA)
For each point: the baseline and DeaMoE layer steps on their committed knobs
(reports/measured/h200/microbench.csv), and DeaMoE with dense_dept_up in 2 / 4 parts, without
and with stagger_dept_up; same routing, rotated weight copies, CUDA graph, median of 50
replays, every variant timed twice, interleaved -> stagger_ab.csv; prints DeaMoE's time and
speedup / ideal per variant.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, time_fn
from deamoe.bench.microbench import (MicrobenchSettings, layer_copies, make_tiles, parse_knobs,
                                     point_inputs)
from deamoe.config import table1_row

POINTS = ["Qwen3-235B-A22B:8", "Qwen3-235B-A22B:24", "Qwen3-235B-A22B:64",
          "Qwen3-235B-A22B:128", "DeepSeek-V3:16", "DeepSeek-V3:64", "DeepSeek-V3:128",
          "Baseline-7B:64", "Baseline-7B:128"]
VARIANTS = {"split2": {"dense_dept_up": 1, "split_launches": 2},
            "split2+stagger": {"dense_dept_up": 1, "split_launches": 2, "stagger_dept_up": 1},
            "split4": {"dense_dept_up": 1, "split_launches": 4},
            "split4+stagger": {"dense_dept_up": 1, "split_launches": 4, "stagger_dept_up": 1}}

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
points = [(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in (sys.argv[2:] or POINTS)]
table = pd.read_csv("reports/measured/h200/microbench.csv")
s = MicrobenchSettings()
rows = []
for model in dict.fromkeys(m for m, _ in points):
    row = table1_row(model)
    for shape, col in ((row.baseline, "baseline_tile"), (row.deamoe, "deamoe_tile")):
        weights = layer_copies(shape, s)
        for batch in [b for m, b in points if m == model]:
            sel = table[(table.model == model) & (table.batch == batch)].iloc[0]
            knobs = parse_knobs(sel[col])
            variants = {"committed": knobs}
            if shape.kind == "deamoe":
                variants.update({k: {**knobs, **v} for k, v in VARIANTS.items()})
            xs, nbytes, _ = point_inputs(shape, weights, batch, s)

            def runner(tiles):
                def run():
                    for x, w in zip(xs, weights):
                        ffn_step(shape, w, x, tiles=tiles, compiled=True)
                return run
            runs = {name: [] for name in variants}
            for _ in range(2):
                for name, v in variants.items():
                    runs[name].append(time_fn(runner(make_tiles(shape, v)), 50,
                                              len(weights)).median_us)
            for name, r in runs.items():
                rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                             "variant": name, "us": min(r), "runs": r})
                print(f"{model:16s} {shape.kind:6s} {batch:4d} {name:15s} {min(r):8.1f} us",
                      flush=True)
            pd.DataFrame(rows).to_csv(out / "stagger_ab.csv", index=False)
        del weights
        torch.cuda.empty_cache()
df = pd.DataFrame(rows)
base = df[df.kind == "moe"].set_index(["model", "batch"])
dea = df[df.kind == "deamoe"].copy()
dea["speedup"] = [base.loc[(m, b), "us"] / u for m, b, u in zip(dea.model, dea.batch, dea.us)]
dea["sp_over_ideal"] = [sp / (base.loc[(m, b), "bytes"] / by)
                        for m, b, sp, by in zip(dea.model, dea.batch, dea.speedup, dea.bytes)]
print(dea.pivot_table(index=["model", "batch"], columns="variant",
                      values="sp_over_ideal").round(4).to_string())
dea.to_csv(out / "stagger_ab.csv", index=False)
