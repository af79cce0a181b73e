"""Stream-K tiles (NOTES.md v29) on the H200: correctness, the dense department GEMM alone, layers.

usage: python scripts/h200_stream_k.py OUT_DIR [MODEL:BATCH ...]   (CUDA)
1. stream_k_battery.csv: the battery's small shapes (1/37/256 tokens, three patterns) with every
   GEMM of both layers on stream-K tiles, Qwen3's Table 1 layers at 13 and 64 tokens with the
   dense department GEMM on stream-K, bf16 against the float32 reference, buffers poisoned;
   then a layer step with a stream-K dense GEMM and a stream-K dept_down captured in a CUDA
   graph and replayed three times (the arrival counts must be back at zero after each replay).
2. stream_k_dense.csv: the dense department gate/up GEMM alone (4 weight copies rotated in a
   CUDA graph, median) for Qwen3 at 16/48/64/128 tokens and DeepSeek-V3 at 64/128: the
   committed pick's tile and block_m against stream-K tiles, with GB moved, TB/s.
3. stream_k_layers.csv: for each MODEL:BATCH (default: Qwen3 16/48/64/128, DeepSeek-V3 64,
   Baseline-7B 128), both layers on their committed knobs, each timed twice interleaved with its
   variants: DeaMoE with the fastest stream-K dept_up from part 2 (the nearest token count of
   that model), with dept_down on its tile plus -sk1 (where the pick has no split_launches),
   and both; the baseline with w13 and w2 on -sk1 (split_launches 1). Median of 50 replays of a
   graph of >= 8 layer steps, as the microbenchmark times them.
"""

import sys
import time
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, random_weights
from deamoe.bench.microbench import (MicrobenchSettings, committed_points, parse_knobs,
                                     time_knob_sets)
from deamoe.config import table1_row
from deamoe.kernels import grouped_gemm as gg
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fused_moe import MoETiles
from deamoe.kernels.grouped_gemm import TileConfig
from deamoe.kernels.stage_benchmark import dense_dept_up_us, dept_gemm_inputs, rotated_us

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
POINTS = sys.argv[2:] or ["Qwen3-235B-A22B:16", "Qwen3-235B-A22B:48", "Qwen3-235B-A22B:64",
                          "Qwen3-235B-A22B:128", "DeepSeek-V3:64", "Baseline-7B:128"]
COPIES = 4
t0 = time.time()
picks = pd.read_csv("reports/measured/h200/microbench.csv")


def log(msg):
    print(f"[{time.time() - t0:5.0f} s] {msg}", flush=True)


def all_tiles(shape, t, dense=True, block_m=0):
    if shape.kind == "deamoe":
        return DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t,
                           dense_dept_up=dense, dense_block_m=block_m)
    return MoETiles(w13=t, w2=t)


# ---- 1. correctness
rows = []
for tname in ("n64-k64-w4-s3-sk1", "n64-k64-w4-s3-tma-swap-sk2", "n128-k64-w8-s4-sk1"):
    t = TileConfig.parse(tname)
    for name, shape in small_shapes().items():
        for seed, tokens in enumerate((1, 37, 256)):
            for pattern in PATTERNS:
                r = check_case(Case(name, shape, tokens, pattern, seed), "cuda", torch.bfloat16,
                               tiles=all_tiles(shape, t, dense=seed != 1))
                rows.append({**r, "tile": tname})
MODEL = "Qwen3-235B-A22B"
row = table1_row(MODEL)
for shape in (row.baseline, row.deamoe):
    layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
    for tname, bm in (("n128-k64-w8-s4-sk1", 64), ("n64-k64-w4-s3-sk2", 0)):
        t = TileConfig.parse(tname)
        for case in (Case(MODEL, shape, 13, "random", 33), Case(MODEL, shape, 64, "empty", 2)):
            r = check_case(case, "cuda", torch.bfloat16, layer=layer,
                           tiles=all_tiles(shape, t, block_m=bm))
            rows.append({**r, "tile": tname})
    del layer
    torch.cuda.empty_cache()
shape = row.deamoe
w = random_weights(shape, "cuda", seed=5)
x = torch.randn(64, shape.h, device="cuda", dtype=torch.bfloat16)
ref = ffn_step(shape, w, x, tiles=DeaMoETiles(dense_dept_up=True)).float()
t = DeaMoETiles(dense_dept_up=True, dept_up=TileConfig.parse("n128-k64-w8-s4-sk1"),
                dense_block_m=64, dept_down=TileConfig.parse("n64-k64-w4-s3-sk1"))
ffn_step(shape, w, x, tiles=t)  # compile + fill the dense alignment cache
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    got = ffn_step(shape, w, x, tiles=t)
for replay in range(3):
    got.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    rel = ((got.float() - ref).norm() / ref.norm()).item()
    finite = bool(torch.isfinite(got).all())
    zero = all(int(c.abs().sum()) == 0 for c in gg._COUNTS.values())
    rows.append({"case": f"{MODEL} graph replay {replay}", "kind": "deamoe", "tokens": 64,
                 "pattern": "router", "dtype": "bfloat16", "rel_err": rel, "finite": finite,
                 "tol": 1e-2, "ok": finite and rel < 1e-2 and zero, "tile": "sk dept_up+dept_down"})
del w, g, got
torch.cuda.empty_cache()
bat = pd.DataFrame(rows)
bat.to_csv(out / "stream_k_battery.csv", index=False)
log(f"battery: {int(bat.ok.sum())}/{len(bat)} ok, max rel err {bat.rel_err.max():.2e}")
if not bat.ok.all():
    print(bat[~bat.ok].to_string(index=False))
    sys.exit(1)

# ---- 2. the dense department GEMM alone
DENSE = {MODEL: {16: (16, 64), 48: (64,), 64: (32, 64), 128: (64, 128)},
         "DeepSeek-V3": {64: (64,), 128: (128,)}}
SK_TILES = ["n128-k64-w8-s4-sk1", "n64-k64-w4-s3-sk1", "n64-k64-w4-s3-sk2",
            "n128-k128-w4-s3-tma-sk1", "n64-k64-w4-s3-tma-swap-sk1", "n64-k64-w4-s3-tma-swap-sk2"]
rows = []
best_sk = {}  # (model, tokens) -> (tile, block_m, us)
for model, pts in DENSE.items():
    shape = table1_row(model).deamoe
    ws = [random_weights(shape, "cuda", seed=i) for i in range(COPIES)]
    dept_bytes = 2 * 2 * shape.n_dept * shape.h_ffn * shape.h  # gate + up, bf16
    for T, bms in pts.items():
        knobs = parse_knobs(picks[(picks.model == model) & (picks.batch == T)].deamoe_tile.iloc[0])
        ref_tile, ref_bm = knobs["dept_up"], knobs.get("dense_block_m") or knobs["dept_block_m"]
        d = dept_gemm_inputs(shape, ws[0]["router"], T)
        cands = [("committed", ref_tile, ref_bm)] + [("stream-k", n, bm) for bm in bms
                                                     for n in SK_TILES]
        for kind, name, bm in cands:
            us = dense_dept_up_us(lambda launch: rotated_us(launch, COPIES), d, ws, shape, bm, name)
            if us is None:
                continue
            rows.append(dict(model=model, tokens=T, kind=kind, tile=name, block_m=bm, us=us,
                             gb=dept_bytes / 1e9, tbps=dept_bytes / (us * 1e-6) / 1e12))
            if kind == "stream-k" and us < best_sk.get((model, T), (None, None, 1e30))[2]:
                best_sk[(model, T)] = (name, bm, us)
        pd.DataFrame(rows).to_csv(out / "stream_k_dense.csv", index=False)
        here = pd.DataFrame(rows)
        here = here[(here.model == model) & (here.tokens == T)]
        log(f"{model} {T}: committed {ref_tile} bm{ref_bm} "
            f"{here[here.kind == 'committed'].us.min():.1f} us; stream-K best "
            f"{best_sk[(model, T)]}")
    del ws
    torch.cuda.empty_cache()

# ---- 3. layers: committed knobs against stream-K variants, interleaved
s = MicrobenchSettings()
rows = []


def sk(tile: str) -> str:
    return tile if "-sk" in tile else tile + "-sk1"


for model, shape, weights, batch, knobs, xs, nbytes in committed_points(POINTS, s):
    sets = {"committed": knobs}
    if shape.kind == "deamoe":
        near = [T for (m, T) in best_sk if m == model]
        if near:
            T = min(near, key=lambda v: abs(v - batch))
            tile, bm, _ = best_sk[(model, T)]
            sets["sk dept_up"] = {**knobs, "dept_up": tile, "dense_block_m": bm}
        if knobs.get("split_launches", 1) == 1:
            sets["sk dept_down"] = {**knobs, "dept_down": sk(knobs["dept_down"])}
            if "sk dept_up" in sets:
                sets["sk both"] = {**sets["sk dept_up"], "dept_down": sk(knobs["dept_down"])}
    else:
        sets["committed again"] = knobs
        sets["sk w13+w2"] = {**knobs, "split_launches": 1, "w13": sk(knobs["w13"]),
                             "w2": sk(knobs["w2"])}

    runs = time_knob_sets(shape, weights, xs, sets, s, label=f"{model} {batch}")
    for name, r in runs.items():
        rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                     "variant": name, "us": min(r), "runs": r,
                     "knobs": ";".join(f"{k}={v}" for k, v in sets[name].items())})
        log(f"{model:16s} {shape.kind:6s} {batch:4d} {name:16s} {min(r):8.1f} us")
    pd.DataFrame(rows).to_csv(out / "stream_k_layers.csv", index=False)
df = pd.DataFrame(rows)
base = df[(df.kind == "moe") & (df.variant == "committed")].set_index(["model", "batch"])
dea = df[df.kind == "deamoe"].copy()
dea["sp_over_ideal"] = [base.loc[(m, b), "us"] / u / (base.loc[(m, b), "bytes"] / by)
                        for m, b, u, by in zip(dea.model, dea.batch, dea.us, dea.bytes)]
print(df.pivot_table(index=["model", "kind", "batch"], columns="variant", values="us")
      .round(1).to_string())
print(dea.pivot_table(index=["model", "batch"], columns="variant", values="sp_over_ideal")
      .round(4).to_string())
log("done")
