"""Every GEMM of both layers alone, tile by tile (NOTES.md v11, v30) on the H200.

usage: python scripts/h200_gemm_sweep.py OUT_DIR [MODEL:BATCH ...] [--tiles T,T,...]
       [--stages S,S,...]   (CUDA)
At each point (default: v11's, where the goals were missed then) every GEMM of both layers
(or only the named stages: w13, w2, dept_up, expert_up, expert_down, dept_down) alone in a
CUDA graph (stage_benchmark.stage_times) on the committed knobs, with the committed tile and
each tile of --tiles; without --tiles, v11's set with pointer loads and the same with TMA loads
(v11 also tried split K for w2 / dept_down, at commit 589ed9b: slower).  Writes gemm_sweep.csv
(model, kind, batch, stage, tile, us, tbps) and prints, per GEMM, the committed tile's time
against the best pointer / TMA variant.
"""

import argparse
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import random_weights
from deamoe.bench.knobs import GEMM_STAGES, make_tiles, parse_knobs
from deamoe.config import table1_row
from deamoe.kernels.deamoe_decode import deamoe_stages
from deamoe.kernels.fused_moe import fused_moe_stages
from deamoe.kernels.stage_benchmark import stage_times
from deamoe.routing import route

parser = argparse.ArgumentParser(description="each GEMM alone, tile by tile (CUDA)")
parser.add_argument("out", type=Path)
parser.add_argument("points", nargs="*", default=["Qwen3-235B-A22B:4", "Qwen3-235B-A22B:16",
                                                  "DeepSeek-V3:8", "Baseline-7B:128"])
parser.add_argument("--tiles", type=lambda v: v.split(","), default=None)
parser.add_argument("--stages", type=lambda v: v.split(","), default=None)
args = parser.parse_args()
out = args.out
out.mkdir(parents=True, exist_ok=True)
table = pd.read_csv("reports/measured/h200/microbench.csv")
POINTS = [(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in args.points]
BASE = ["n128-k128-w4-s3", "n64-k128-w4-s4", "n64-k256-w4-s3", "n32-k256-w4-s3", "n32-k128-w4-s3"]
rows = []
for model, batch in POINTS:
    row = table1_row(model)
    sel = table[(table.model == model) & (table.batch == batch)].iloc[0]
    for shape, col in ((row.baseline, "baseline_tile"), (row.deamoe, "deamoe_tile")):
        w = random_weights(shape, "cuda")
        x = torch.randn(batch, shape.h, device="cuda", dtype=torch.bfloat16)
        ids, weights = route(shape, torch.nn.functional.linear(x, w["router"]))
        knobs = parse_knobs(sel[col])
        per = shape.experts_per_dept if shape.kind == "deamoe" else 1
        groups = {"w13": 1, "w2": 1, "dept_up": per, "dept_down": per, "expert_up": 1,
                  "expert_down": 1}
        for stage in GEMM_STAGES[shape.kind]:
            if args.stages is not None and stage not in args.stages:
                continue
            variants = ([knobs[stage]] + args.tiles if args.tiles is not None else
                        [knobs[stage]] + BASE + [t + "-tma" for t in [knobs[stage]] + BASE])
            for v in dict.fromkeys(variants):
                # each GEMM alone: no parts on parallel streams, the routed department GEMM
                tiles = make_tiles(shape, {**knobs, stage: v, "split_launches": 1,
                                           **({"dense_dept_up": 0} if shape.kind == "deamoe"
                                              else {})})
                try:
                    if shape.kind == "deamoe":
                        _, stages = deamoe_stages(x, w["dept_gate"], w["dept_up"], w["dept_down"],
                                                  w["expert_gate"], w["expert_up"],
                                                  w["expert_down"], ids, weights, shape.operator,
                                                  tiles)
                    else:
                        _, stages = fused_moe_stages(x, w["gate_proj"], w["up_proj"],
                                                     w["down_proj"], ids, weights, tiles)
                    r = stage_times(stages, ids, groups, reps=25, only={stage})[0]
                except Exception as exc:  # noqa: BLE001 - a variant that does not compile is skipped
                    print(model, batch, stage, v, type(exc).__name__, str(exc).splitlines()[0][:150])
                    continue
                rows.append({"model": model, "kind": shape.kind, "batch": batch, "stage": stage,
                             "tile": v, "committed": v == knobs[stage], "us": r["us"],
                             "tbps": r["tbps"]})
            pd.DataFrame(rows).to_csv(out / "gemm_sweep.csv", index=False)
        del w
        torch.cuda.empty_cache()
df = pd.DataFrame(rows)
df["family"] = df.tile.map(lambda t: "tma" if "-tma" in t else "ptr")
for (m, b, k, st), g in df.groupby(["model", "batch", "kind", "stage"], sort=False):
    com = g[g.committed]
    line = f"{m[:12]:12s} {b:4d} {k:6s} {st:12s} committed {com.us.min():7.1f}"
    for fam, f in g.groupby("family"):
        best = f.loc[f.us.idxmin()]
        line += f" | {fam} {best.us:7.1f} ({best.tile}, {best.tbps:.2f} TB/s)"
    print(line)
