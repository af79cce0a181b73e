"""One-launch chain vs separate GEMM launches (NOTES.md v10) on the H200, on the committed tiles.

usage: python scripts/h200_chain.py OUT_DIR [MICROBENCH_CSV]   (CUDA)
1. correctness: the battery's cases with chained kernels (bf16, small shapes and the Table 1
   shapes at 1/13/64/256 tokens, "same" and "empty" routings) -> chain_battery.csv;
2. timing: for each model and batch, the tiles of MICROBENCH_CSV (default: the committed
   reports/measured/h200/microbench.csv) with chain off and on, for both layers, same routing,
   same rotated weight copies, CUDA graph, median of 50 replays -> chain_timing.csv.
"""

import math
import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, layer_bytes, random_weights, step_bytes, time_fn
from deamoe.bench.microbench import MicrobenchSettings, make_tiles, parse_knobs
from deamoe.config import table1_row
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fused_moe import MoETiles
from deamoe.kernels.grouped_gemm import TileConfig
from deamoe.routing import route

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
table = pd.read_csv(sys.argv[2] if len(sys.argv) > 2 else "reports/measured/h200/microbench.csv")
MODELS = ("Qwen3-235B-A22B", "DeepSeek-V3", "Baseline-7B")
BATCHES = [int(b) for b in (sys.argv[3].split(",") if len(sys.argv) > 3 else (4, 8, 16, 32, 64, 128))]

# 1. correctness of the chained kernels
t = TileConfig.parse("n64-k128-w4-s4")
w8 = TileConfig.parse("n128-k64-w8-s4")
chain_tiles = {"moe": MoETiles(w13=t, w2=t, chain=True),
               "deamoe": DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t, chain=True)}
tall = DeaMoETiles(dept_block_m=128, dept_up=w8, expert_up=t, expert_down=t, dept_down=w8,
                   chain=True)
rows = []
for name, shape in small_shapes().items():
    for seed, tokens in enumerate((1, 37, 256)):
        for pattern in PATTERNS:
            rows.append(check_case(Case(name, shape, tokens, pattern, seed), "cuda", torch.bfloat16,
                                   tiles=chain_tiles[shape.kind]))
for model in MODELS:
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
        cases = [Case(model, shape, n, "random", seed=20 + n) for n in (1, 13, 64, 256)]
        cases += [Case(model, shape, 64, "same", 1), Case(model, shape, 64, "empty", 2)]
        for case in cases:
            rows.append(check_case(case, "cuda", torch.bfloat16, layer=layer,
                                   tiles=chain_tiles[shape.kind]))
        if shape.kind == "deamoe":
            rows.append({**check_case(Case(model, shape, 128, "random", 7), "cuda",
                                      torch.bfloat16, layer=layer, tiles=tall), "case": model + " bm128-w8"})
        del layer
        torch.cuda.empty_cache()
bat = pd.DataFrame(rows)
bat.to_csv(out / "chain_battery.csv", index=False)
print(f"chain battery: {int(bat.ok.sum())}/{len(bat)} ok, max rel err {bat.rel_err.max():.2e}")
print(bat[~bat.ok].to_string(index=False))

# 2. timing, chain off/on on the committed tiles
s = MicrobenchSettings()
timing = []
for model in MODELS:
    row = table1_row(model)
    for shape, col in ((row.baseline, "baseline_tile"), (row.deamoe, "deamoe_tile")):
        copies = max(1, min(s.max_copies, math.ceil(s.rotate_bytes / layer_bytes(shape))))
        weights = [random_weights(shape, "cuda", seed=100 * c) for c in range(copies)]
        for batch in BATCHES:
            sel = table[(table.model == model) & (table.batch == batch)]
            if sel.empty:
                continue
            knobs = parse_knobs(sel.iloc[0][col])
            gen = torch.Generator(device="cuda").manual_seed(batch)
            xs = [torch.randn(batch, shape.h, generator=gen, device="cuda", dtype=torch.bfloat16)
                  for _ in range(copies)]
            with torch.no_grad():
                ids = [route(shape, torch.nn.functional.linear(x, w["router"]))[0]
                       for x, w in zip(xs, weights)]
            nbytes = sum(step_bytes(shape, i) for i in ids) / copies
            res = {}
            for chain in (0, 1, 0, 1):  # interleaved twice: drift shows as a difference
                tiles = make_tiles(shape, {**knobs, "chain": chain})

                def run():
                    for x, w in zip(xs, weights):
                        ffn_step(shape, w, x, tiles=tiles, compiled=True)
                try:
                    us = time_fn(run, 50, copies).median_us
                except Exception as exc:  # noqa: BLE001
                    print(model, shape.kind, batch, chain, type(exc).__name__, str(exc)[:200])
                    us = float("nan")
                res.setdefault(chain, []).append(us)
            timing.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                           "sep_us": min(res[0]), "chain_us": min(res[1]),
                           "sep_runs": res[0], "chain_runs": res[1], "tile": sel.iloc[0][col]})
            r = timing[-1]
            print(f"{model:16s} {shape.kind:6s} {batch:4d} sep {r['sep_us']:8.1f} chain "
                  f"{r['chain_us']:8.1f} us  ({r['chain_us'] / r['sep_us']:.3f}x)  "
                  f"{nbytes / r['chain_us'] / 1e6:.2f} TB/s", flush=True)
            pd.DataFrame(timing).to_csv(out / "chain_timing.csv", index=False)
        del weights
        torch.cuda.empty_cache()
df = pd.DataFrame(timing)
w = df.pivot_table(index=["model", "batch"], columns="kind", values=["sep_us", "chain_us"])
w["sp_sep"] = w[("sep_us", "moe")] / w[("sep_us", "deamoe")]
w["sp_chain"] = w[("chain_us", "moe")] / w[("chain_us", "deamoe")]
print(w.round(3).to_string())
