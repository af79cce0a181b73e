"""GPU correctness of the committed DeaMoE picks that run a stream schedule (NOTES.md v53c).

usage: python scripts/h200_picks_check.py OUT_DIR [MICROBENCH_CSV] [all]   (CUDA) -> picks_check.csv
Each DeaMoE pick of the table (default reports/measured/h200/microbench.csv) with dense_parts
(`all`: every DeaMoE pick), at its own batch on its model's Table 1 layer: eagerly as a battery
case (bf16 against the float32 reference, buffers poisoned), and captured in a CUDA graph and
replayed twice (output poisoned before each replay) against the eager step on the default
tiles.  Exits 1 if any case fails.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.knobs import make_tiles, parse_knobs
from deamoe.bench.layer_step import ffn_step, graph_replay_rows, random_weights
from deamoe.config import table1_row
from deamoe.kernels.battery import Case, build_layer, check_case
from deamoe.kernels.deamoe_decode import DeaMoETiles

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
args = sys.argv[2:]
every = "all" in args
table = pd.read_csv(next((a for a in args if a != "all"), "reports/measured/h200/microbench.csv"))
picks = table if every else table[table.deamoe_tile.str.contains("dense_parts=")]

rows = []
for model, group in picks.groupby("model", sort=False):
    shape = table1_row(model).deamoe
    layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
    for r in group.itertuples():
        tiles = make_tiles(shape, parse_knobs(r.deamoe_tile))
        row = check_case(Case(model, shape, int(r.batch), "random", seed=int(r.batch)), "cuda",
                         torch.bfloat16, layer=layer, tiles=tiles)
        rows.append({**row, "batch": int(r.batch), "path": "eager", "knobs": r.deamoe_tile})
    del layer
    torch.cuda.empty_cache()
    w = random_weights(shape, "cuda", seed=5)
    for r in group.itertuples():
        x = torch.randn(int(r.batch), shape.h, device="cuda", dtype=torch.bfloat16)
        ref = ffn_step(shape, w, x, tiles=DeaMoETiles()).float()
        tiles = make_tiles(shape, parse_knobs(r.deamoe_tile))
        rows += [{**g, "batch": int(r.batch), "path": "graph", "knobs": r.deamoe_tile}
                 for g in graph_replay_rows(shape, w, x, tiles, ref, replays=2, case=model)]
    del w
    torch.cuda.empty_cache()
    print(f"{model}: {len(group)} picks checked", flush=True)
df = pd.DataFrame(rows)
df.to_csv(out / "picks_check.csv", index=False)
print(f"committed picks: {int(df.ok.sum())}/{len(df)} ok, max rel err {df.rel_err.max():.2e}")
print(df[~df.ok].to_string(index=False))
sys.exit(0 if bool(df.ok.all()) else 1)
