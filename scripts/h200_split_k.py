"""Split K for Qwen3's dense department GEMM (NOTES.md v27) on the H200.

usage: python scripts/h200_split_k.py OUT_DIR   (CUDA)
1. split_k_battery.csv: the battery's small shapes (1/37/256 tokens, three patterns) with every
   GEMM of both layers on split-K tiles, and Qwen3's Table 1 layers at 13 and 64 tokens with
   the dense department GEMM split, bf16 against the float32 reference, buffers poisoned; then
   the timed step with a split dense GEMM captured in a CUDA graph, replayed twice (the arrival
   counts must start from zero on every replay), against the eager step without split K.
2. split_k_dense.csv: the dense department gate/up GEMM of Qwen3-235B-A22B alone at 48/64/128
   tokens (4 weight copies rotated in a CUDA graph, median): the committed pick's tile and
   block_m, and two tiles at each block_m unsplit, in 2 and in 4 K parts.
3. best_<T>.txt: `h200_variants.py` arguments for the fastest split tile at T where it beats
   the committed pick alone by more than 2% (no file otherwise).
"""

import sys
import time
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, random_weights
from deamoe.bench.microbench import parse_knobs
from deamoe.config import table1_row
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fused_moe import MoETiles
from deamoe.kernels.grouped_gemm import TileConfig
from deamoe.kernels.stage_benchmark import dense_dept_up_us, dept_gemm_inputs, rotated_us

MODEL = "Qwen3-235B-A22B"
TILES = ["n128-k64-w8-s4", "n64-k64-w4-s3"]
BLOCK_M = {48: (64,), 64: (64,), 128: (64, 128)}
COPIES = 4

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
t0 = time.time()


def tiles_for(shape, t, dense=True, block_m=0):
    if shape.kind == "deamoe":
        return DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t,
                           dense_dept_up=dense, dense_block_m=block_m)
    return MoETiles(w13=t, w2=t)


# ---- 1. correctness
rows = []
for tname in ("n64-k64-w4-s3-x2", "n64-k64-w4-s3-tma-x4"):
    t = TileConfig.parse(tname)
    for name, shape in small_shapes().items():
        for seed, tokens in enumerate((1, 37, 256)):
            for pattern in PATTERNS:
                r = check_case(Case(name, shape, tokens, pattern, seed), "cuda", torch.bfloat16,
                               tiles=tiles_for(shape, t, dense=seed != 1))
                rows.append({**r, "tile": tname})
row = table1_row(MODEL)
for shape in (row.baseline, row.deamoe):
    layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
    for tname, bm in (("n128-k64-w8-s4-x2", 64), ("n64-k64-w4-s3-x4", 0)):
        t = TileConfig.parse(tname)
        for case in (Case(MODEL, shape, 13, "random", 33), Case(MODEL, shape, 64, "empty", 2)):
            r = check_case(case, "cuda", torch.bfloat16, layer=layer,
                           tiles=tiles_for(shape, t, block_m=bm))
            rows.append({**r, "tile": tname})
    del layer
    torch.cuda.empty_cache()
shape = row.deamoe
w = random_weights(shape, "cuda", seed=5)
x = torch.randn(64, shape.h, device="cuda", dtype=torch.bfloat16)
ref = ffn_step(shape, w, x, tiles=DeaMoETiles(dense_dept_up=True)).float()
t = DeaMoETiles(dense_dept_up=True, dept_up=TileConfig.parse("n128-k64-w8-s4-x4"),
                dense_block_m=64)
ffn_step(shape, w, x, tiles=t)  # compile + fill the dense alignment cache
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    got = ffn_step(shape, w, x, tiles=t)
for replay in range(2):
    got.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    rel = ((got.float() - ref).norm() / ref.norm()).item()
    finite = bool(torch.isfinite(got).all())
    rows.append({"case": f"{MODEL} graph replay {replay}", "kind": "deamoe", "tokens": 64,
                 "pattern": "router", "dtype": "bfloat16", "rel_err": rel, "finite": finite,
                 "tol": 1e-2, "ok": finite and rel < 1e-2, "tile": t.dept_up.name})
del w, g, got
torch.cuda.empty_cache()
bat = pd.DataFrame(rows)
bat.to_csv(out / "split_k_battery.csv", index=False)
print(f"battery: {int(bat.ok.sum())}/{len(bat)} ok, max rel err {bat.rel_err.max():.2e} "
      f"({time.time() - t0:.0f} s)", flush=True)
if not bat.ok.all():
    print(bat[~bat.ok].to_string(index=False))
    sys.exit(1)

# ---- 2. the dense department GEMM alone
ws = [random_weights(shape, "cuda", seed=i) for i in range(COPIES)]
dept_bytes = 2 * 2 * shape.n_dept * shape.h_ffn * shape.h  # gate + up, bf16
rows = []


def bench(launch) -> float:
    return rotated_us(launch, COPIES)


picks = pd.read_csv("reports/measured/h200/microbench.csv")
for T, bms in BLOCK_M.items():
    knobs = parse_knobs(picks[(picks.model == MODEL) & (picks.batch == T)].deamoe_tile.iloc[0])
    ref_tile, ref_bm = knobs["dept_up"], knobs.get("dense_block_m") or knobs["dept_block_m"]
    d = dept_gemm_inputs(shape, ws[0]["router"], T)
    cands = [("committed", ref_tile, ref_bm)]
    cands += [("candidate", f"{n}{f'-x{s}' if s > 1 else ''}", bm)
              for bm in bms for n in TILES for s in (1, 2, 4)]
    for kind, name, bm in cands:
        us = dense_dept_up_us(bench, d, ws, shape, bm, name)
        if us is None:
            continue
        rows.append(dict(tokens=T, kind=kind, tile=name, block_m=bm,
                         split_k=TileConfig.parse(name).split_k, us=us,
                         tbps=dept_bytes / (us * 1e-6) / 1e12))
        print(rows[-1], flush=True)
    pd.DataFrame(rows).to_csv(out / "split_k_dense.csv", index=False)
    df = pd.DataFrame(rows)
    here = df[df.tokens == T]
    ref_us = here[here.kind == "committed"].us.min()
    split = here[here.split_k > 1].sort_values("us")
    if len(split) and split.us.iloc[0] < 0.98 * ref_us:
        best = split.iloc[0]
        (out / f"best_{T}.txt").write_text(
            f"split:dept_up={best.tile},dense_block_m={int(best.block_m)}\n")
        print(f"{T} tokens: {best.tile} bm{int(best.block_m)} {best.us:.1f} us against the "
              f"committed {ref_us:.1f} us", flush=True)
print(f"done ({time.time() - t0:.0f} s)")
