"""The swapped GEMM orientation (-swap tiles, NOTES.md v17) on the H200: correctness, Qwen3's
department GEMMs alone, and the layers with the best swapped department tiles.

usage: python scripts/h200_swap_tiles.py OUT_DIR   (CUDA)
1. swap_battery.csv: the battery's small shapes (three patterns, 1/37/256 tokens) and the Qwen3
   and Baseline-7B Table 1 shapes (64 tokens: random, same, empty) with every GEMM of both
   layers on a -swap tile (and DeaMoE's dense department up-projection), bf16 against the
   float32 reference, buffers poisoned.
2. swap_dept_tiles.csv: Qwen3-235B-A22B DeaMoE at 8/24/64/128 tokens, the dense department
   gate/up GEMM and the routed department down GEMM alone (4 weight copies rotated in a CUDA
   graph, median), plain tiles (the committed picks' kind) against -swap tiles, by block_m.
3. swap_layers.csv: Qwen3 layers on their committed knobs (reports/measured/h200/microbench.csv)
   against the same knobs with the best swapped dept_up (+ dense_block_m) from 2, and also with
   the best swapped dept_down (+ dept_block_m); the baseline on its knobs and with w13/w2 on
   -swap tiles (the same option for both layers); interleaved twice, min of the medians.
"""

import sys
import time
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import layer_steps, random_weights, time_fn
from deamoe.bench.knobs import make_tiles
from deamoe.bench.microbench import MicrobenchSettings, committed_points, graph_repeats
from deamoe.config import table1_row
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles, dept_down_gemm
from deamoe.kernels.fused_moe import MoETiles
from deamoe.kernels.grouped_gemm import TileConfig
from deamoe.kernels.stage_benchmark import dense_dept_up_us, dept_gemm_inputs, rotated_us

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
t0 = time.time()
SWAP = ["n64-k64-w4-s3-tma-swap", "n64-k128-w4-s3-tma-swap", "n128-k64-w4-s3-tma-swap",
        "n128-k64-w8-s3-tma-swap", "n128-k128-w8-s3-tma-swap", "n64-k128-w4-s4-swap"]
UP_REF = ["n128-k128-w4-s3-tma", "n64-k64-w4-s3-tma", "n64-k128-w4-s4"]
DOWN_REF = ["n128-k128-w4-s3-tma", "n256-k64-w8-s3-tma", "n64-k64-w4-s3"]
DOWN_SWAP = SWAP + ["n256-k64-w8-s3-tma-swap"]
# block_m of the committed picks (plain tiles) and what the swapped ones try
REF_BM = {8: 16, 24: 32, 64: 64, 128: 64}
SWAP_BM = {8: (16,), 24: (16, 32), 64: (32, 64), 128: (64, 128)}
COPIES = 4

# ---- 1. correctness
rows = []
check_tiles = [TileConfig.parse(t) for t in ("n64-k64-w4-s3-tma-swap", "n128-k64-w8-s4-swap")]


def swapped(shape, t, dense):
    if shape.kind == "deamoe":
        return DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t,
                           dense_dept_up=dense)
    return MoETiles(w13=t, w2=t)


for t in check_tiles:
    for name, shape in small_shapes().items():
        for seed, tokens in enumerate((1, 37, 256)):
            for pattern in PATTERNS:
                r = check_case(Case(name, shape, tokens, pattern, seed), "cuda", torch.bfloat16,
                               tiles=swapped(shape, t, dense=seed == 1))
                rows.append({**r, "tile": t.name})
    for model in ("Qwen3-235B-A22B", "Baseline-7B"):
        for shape in (table1_row(model).baseline, table1_row(model).deamoe):
            layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
            for seed, pattern in enumerate(PATTERNS):
                r = check_case(Case(model, shape, 64, pattern, seed), "cuda", torch.bfloat16,
                               layer=layer, tiles=swapped(shape, t, dense=seed == 0))
                rows.append({**r, "tile": t.name})
            del layer
            torch.cuda.empty_cache()
bat = pd.DataFrame(rows)
bat.to_csv(out / "swap_battery.csv", index=False)
print(f"battery: {int(bat['ok'].sum())}/{len(bat)} ok, max rel err {bat['rel_err'].max():.2e} "
      f"({time.time() - t0:.0f} s)", flush=True)

# ---- 2. department GEMMs alone
shape = table1_row("Qwen3-235B-A22B").deamoe
per, n_dept, f, h = shape.experts_per_dept, shape.n_dept, shape.h_ffn, shape.h
ws = [random_weights(shape, "cuda", seed=i) for i in range(COPIES)]
dept_bytes = 2 * n_dept * f * h
rows = []


def bench(launch) -> float:
    return rotated_us(launch, COPIES)


def record(stage, T, depts, bm, name, us, nbytes):
    rows.append(dict(stage=stage, tokens=T, depts=depts, block_m=bm, tile=name, us=us,
                     tbps=nbytes / (us * 1e-6) / 1e12))
    print(rows[-1], flush=True)


for T in SWAP_BM:
    d = dept_gemm_inputs(shape, ws[0]["router"], T)
    ids, depts, out_acc, s32 = (d[k] for k in ("ids", "depts", "out_acc", "s32"))
    cands = [(n, REF_BM[T]) for n in UP_REF] + [(n, bm) for n in SWAP for bm in SWAP_BM[T]]
    for name, bm in cands:
        us = dense_dept_up_us(bench, d, ws, shape, bm, name)
        if us is not None:
            record("dept_up_dense", T, n_dept, bm, name, us, 2 * dept_bytes)
    cands = [(n, REF_BM[T]) for n in DOWN_REF] + [(n, bm) for n in DOWN_SWAP for bm in SWAP_BM[T]]
    for name, bm in cands:
        (al_dept,) = align(ids, AlignSpec(n_groups=n_dept, per_group=per, dedup=True, block_m=bm))
        tile = TileConfig.parse(name)
        try:
            us = bench(lambda i: dept_down_gemm(
                s32, ws[i]["dept_down"], out_acc, al_dept, ids, per, tile))
        except Exception as exc:  # noqa: BLE001
            print("dept_down", T, bm, name, type(exc).__name__, str(exc).splitlines()[0][:100])
            continue
        record("dept_down", T, depts, bm, name, us, depts / n_dept * dept_bytes)
    pd.DataFrame(rows).to_csv(out / "swap_dept_tiles.csv", index=False)
del ws
torch.cuda.empty_cache()
df = pd.DataFrame(rows)
df["swap"] = df["tile"].str.endswith("-swap")
best = {}
for (stage, T, sw), g in df.groupby(["stage", "tokens", "swap"]):
    b = g.loc[g["us"].idxmin()]
    best[stage, T, sw] = b
    print(f"{stage:14s} T={T:4d} swap={sw!s:5s} best {b['us']:7.1f} us ({b['tbps']:.2f} TB/s) "
          f"bm={b['block_m']} {b['tile']}")
print(f"({time.time() - t0:.0f} s)", flush=True)

# ---- 3. the layers
s = MicrobenchSettings()
points = ["Qwen3-235B-A22B:8", "Qwen3-235B-A22B:24", "Qwen3-235B-A22B:48",
          "Qwen3-235B-A22B:64", "Qwen3-235B-A22B:128"]
near = {8: 8, 24: 24, 48: 64, 64: 64, 128: 128}  # part 2's token count for each point
rows = []
for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(points, s):
    if shape.kind == "deamoe":
        up, down = best["dept_up_dense", near[batch], True], best["dept_down", near[batch], True]
        cap = max(16, 1 << (batch - 1).bit_length())
        v_up = {**knobs, "dept_up": up["tile"], "dense_block_m": min(int(up["block_m"]), cap)}
        variants = {"committed": knobs, "swap_up": v_up,
                    "swap_up_down": {**v_up, "dept_down": down["tile"],
                                     "dept_block_m": min(int(down["block_m"]), cap)}}
    else:
        variants = {"committed": knobs,
                    "swap_n64": {**knobs, "w13": "n64-k128-w4-s3-tma-swap",
                                 "w2": "n64-k128-w4-s3-tma-swap"},
                    "swap_n128": {**knobs, "w13": "n128-k64-w8-s3-tma-swap",
                                  "w2": "n128-k64-w8-s3-tma-swap"}}
    runs = {v: [] for v in variants}
    reps = graph_repeats(len(weights), s)
    for _ in range(2):
        for v, k in variants.items():
            run = layer_steps(shape, weights, inputs.live, make_tiles(shape, k), reps)
            runs[v].append(time_fn(run, 50, reps * len(weights),
                                     prepare=inputs.prepare).median_us)
    for v, k in variants.items():
        rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                     "variant": v, "us": min(runs[v]), "runs": runs[v],
                     "knobs": ";".join(f"{a}={b}" for a, b in k.items())})
        print(f"{model:16s} {shape.kind:6s} {batch:4d} {v:13s} {min(runs[v]):8.1f} us", flush=True)
    pd.DataFrame(rows).to_csv(out / "swap_layers.csv", index=False)
print(f"done ({time.time() - t0:.0f} s)")
