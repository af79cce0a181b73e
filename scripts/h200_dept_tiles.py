"""Qwen3's department GEMMs alone, by tile, on the H200 (NOTES.md v15).

usage: python scripts/h200_dept_tiles.py OUT_DIR   (CUDA).  For the Qwen3-235B-A22B DeaMoE shape
at 8/24/64/128 tokens: the dense department gate/up GEMM (every token in every department, as
`dense_dept_up` runs it) and the routed department down GEMM, the latter with its S operand in
float32 (as the layer has it) and in bfloat16 (what a bf16 S would save), for each block_m x
tile below.  Each launch runs on 4 weight copies in turn inside a CUDA graph (400-800 MB, so
nothing is served from the 60 MB L2); median of the replays -> dept_tiles.csv.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import random_weights
from deamoe.config import table1_row
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.deamoe_decode import dept_down_gemm
from deamoe.kernels.grouped_gemm import TileConfig
from deamoe.kernels.stage_benchmark import dense_dept_up_us, dept_gemm_inputs, rotated_us

UP_TILES = ["n128-k128-w4-s3-tma", "n64-k128-w4-s4", "n64-k64-w4-s3", "n64-k64-w4-s3-tma",
            "n32-k128-w4-s3", "n32-k128-w4-s4-tma", "n32-k256-w4-s3-tma", "n64-k128-w4-s4-tma",
            "n64-k128-w8-s3-tma", "n128-k64-w8-s4", "n128-k64-w8-s3-tma", "n16-k256-w4-s4-tma"]
DOWN_TILES = ["n128-k128-w4-s3-tma", "n128-k64-w8-s4", "n256-k64-w8-s3-tma", "n64-k128-w4-s4",
              "n64-k256-w4-s3-tma", "n128-k128-w8-s3-tma"]
BLOCK_M = {8: (16,), 24: (32,), 64: (32, 64), 128: (64, 128)}
COPIES = 4

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
shape = table1_row("Qwen3-235B-A22B").deamoe
per, n_dept, f, h = shape.experts_per_dept, shape.n_dept, shape.h_ffn, shape.h
ws = [random_weights(shape, "cuda", seed=i) for i in range(COPIES)]
dept_bytes = 2 * n_dept * f * h  # one department weight matrix set, bf16
rows = []


def bench(launch) -> float:
    return rotated_us(launch, COPIES)


for T in BLOCK_M:
    d = dept_gemm_inputs(shape, ws[0]["router"], T)
    ids, depts, out_acc, s32 = (d[k] for k in ("ids", "depts", "out_acc", "s32"))
    s16 = s32.to(torch.bfloat16)
    for bm in BLOCK_M[T]:
        (al_dept,) = align(ids, AlignSpec(n_groups=n_dept, per_group=per, dedup=True, block_m=bm))
        for name in UP_TILES:
            us = dense_dept_up_us(bench, d, ws, shape, bm, name)
            if us is None:
                continue
            rows.append(dict(stage="dept_up_dense", tokens=T, depts=n_dept, block_m=bm, tile=name,
                             s_dtype="", us=us, tbps=2 * dept_bytes / (us * 1e-6) / 1e12))
            print(rows[-1], flush=True)
        for name in DOWN_TILES:
            tile = TileConfig.parse(name)
            for s_dtype, s in (("float32", s32), ("bfloat16", s16)):
                try:
                    us = bench(lambda i: dept_down_gemm(
                        s, ws[i]["dept_down"], out_acc, al_dept, ids, per, tile))
                except Exception as exc:  # noqa: BLE001
                    print("dept_down", T, bm, name, type(exc).__name__,
                          str(exc).splitlines()[0][:100])
                    continue
                rows.append(dict(stage="dept_down", tokens=T, depts=depts, block_m=bm, tile=name,
                                 s_dtype=s_dtype, us=us,
                                 tbps=depts / n_dept * dept_bytes / (us * 1e-6) / 1e12))
                print(rows[-1], flush=True)
        pd.DataFrame(rows).to_csv(out / "dept_tiles.csv", index=False)

df = pd.DataFrame(rows)
for (stage, T, sd), g in df.groupby(["stage", "tokens", "s_dtype"]):
    b = g.loc[g["us"].idxmin()]
    print(f"{stage:14s} T={T:4d} {sd:9s} best {b['us']:7.1f} us ({b['tbps']:.2f} TB/s) "
          f"bm={b['block_m']} {b['tile']}")
