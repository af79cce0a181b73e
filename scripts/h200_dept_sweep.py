"""Department GEMMs at >= 64 tokens (NOTES.md v7): BLOCK_M x tile sweep on the H200.

usage: python scripts/h200_dept_sweep.py OUT_DIR   (CUDA).  For DeepSeek-V3 and Qwen3 DeaMoE
shapes at 64/96/128 tokens: dept_up and dept_down, each alone in a CUDA graph (weights read
from HBM: one department tile set is > L2), for department BLOCK_M 32/64/128 x every tile of
the microbenchmark's list; writes dept_sweep.csv (stage, us, TB/s of the departments used).
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import random_weights
from deamoe.bench.microbench import MicrobenchSettings
from deamoe.config import table1_row
from deamoe.kernels.deamoe_decode import DeaMoETiles, deamoe_stages
from deamoe.kernels.grouped_gemm import TileConfig
from deamoe.kernels.stage_benchmark import stage_times
from deamoe.routing import route

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rows = []
tiles = MicrobenchSettings().tiles + ["n32-k128-w4-s4", "n64-k128-w8-s3", "n256-k64-w8-s3"]
for model in ("DeepSeek-V3", "Qwen3-235B-A22B"):
    shape = table1_row(model).deamoe
    w = random_weights(shape, "cuda")
    for T in (64, 96, 128):
        x = torch.randn(T, shape.h, device="cuda", dtype=torch.bfloat16)
        ids, weights = route(shape, torch.nn.functional.linear(x, w["router"]))
        depts = int(torch.unique(ids // shape.experts_per_dept).numel())
        for bm in (32, 64, 128):
            for tile in tiles:
                t = TileConfig.parse(tile)
                tiles_obj = DeaMoETiles(dept_block_m=bm, dept_up=t, dept_down=t)
                try:
                    _, stages = deamoe_stages(x, w["dept_gate"], w["dept_up"], w["dept_down"],
                                              w["expert_gate"], w["expert_up"], w["expert_down"],
                                              ids, weights, shape.operator, tiles_obj)
                    per = {"dept_up": shape.experts_per_dept, "dept_down": shape.experts_per_dept}
                    for r in stage_times(stages, ids, per, reps=20, only=set(per)):
                        rows.append({"model": model, "tokens": T, "depts": depts, "block_m": bm,
                                     "tile": tile, **r})
                except Exception as exc:  # noqa: BLE001 - a config that does not fit is skipped
                    print(model, T, bm, tile, type(exc).__name__, str(exc).splitlines()[0][:120])
        pd.DataFrame(rows).to_csv(out / "dept_sweep.csv", index=False)
df = pd.DataFrame(rows)
best = df.loc[df.groupby(["model", "tokens", "stage"])["us"].idxmin()]
print(best.to_string(index=False))
for (m, T, st), g in df.groupby(["model", "tokens", "stage"]):
    print(m, T, st, "by block_m:", g.groupby("block_m")["us"].min().round(1).to_dict())
