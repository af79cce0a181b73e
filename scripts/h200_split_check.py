"""GPU correctness of the stream options (NOTES.md v13, v14): the battery's cases with the
groups in 2 and 4 parts on parallel CUDA streams (split_launches, both layers) and, for DeaMoE,
the dense department up-projection on a side stream beside the routing (dense_dept_up, alone,
with 2 parts, with 64-row blocks, dense in 1 of 2 parts: dense_parts), bf16 against the float32 reference; then the timed layer step
with dense_dept_up, captured in a CUDA graph, against the same step run eagerly without it.

usage: python scripts/h200_split_check.py OUT_DIR   (CUDA) -> split_battery.csv
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, graph_replay_rows, random_weights
from deamoe.config import table1_row
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fused_moe import MoETiles

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


VARIANTS = {"moe": [{"split_launches": 2}, {"split_launches": 4}],
            "deamoe": [{"split_launches": 2}, {"split_launches": 4}, {"dense_dept_up": True},
                       {"dense_dept_up": True, "split_launches": 2},
                       {"dense_dept_up": True, "dense_block_m": 64},
                       {"dense_dept_up": True, "split_launches": 2, "dense_parts": 1}]}


def tiles(shape, variant):
    return (DeaMoETiles if shape.kind == "deamoe" else MoETiles)(**variant)


def label(variant):
    return ";".join(f"{k}={int(v)}" for k, v in variant.items())


rows = []
for name, shape in small_shapes().items():
    for variant in VARIANTS[shape.kind]:
        for seed, tokens in enumerate((1, 37, 256)):
            for pattern in PATTERNS:
                r = check_case(Case(name, shape, tokens, pattern, seed), "cuda", torch.bfloat16,
                               tiles=tiles(shape, variant))
                rows.append({**r, "variant": label(variant)})
for model in ("Baseline-7B", "Qwen3-235B-A22B", "DeepSeek-V3"):
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
        for variant in VARIANTS[shape.kind]:
            for case in (Case(model, shape, 13, "random", 33), Case(model, shape, 64, "empty", 2)):
                r = check_case(case, "cuda", torch.bfloat16, layer=layer,
                               tiles=tiles(shape, variant))
                rows.append({**r, "variant": label(variant)})
        del layer
        torch.cuda.empty_cache()
# the timed path: router + routing on the main stream beside the dense department
# up-projection, captured in a CUDA graph and replayed, against the same step without it (eager)
for model in ("Baseline-7B", "Qwen3-235B-A22B", "DeepSeek-V3"):
    shape = table1_row(model).deamoe
    w = random_weights(shape, "cuda", seed=5)
    for tokens in (4, 64):
        x = torch.randn(tokens, shape.h, device="cuda", dtype=torch.bfloat16)
        ref = ffn_step(shape, w, x, tiles=DeaMoETiles()).float()
        for variant in ({"dense_dept_up": True}, {"dense_dept_up": True, "split_launches": 2},
                        {"dense_dept_up": True, "split_launches": 4, "dense_parts": 1},
                        {"dense_dept_up": True, "split_launches": 4, "dense_parts": 3}):
            rows += [{**r, "variant": label(variant) + ";graph"} for r in graph_replay_rows(
                shape, w, x, DeaMoETiles(**variant), ref, case=f"{model} graph")]
    del w
    torch.cuda.empty_cache()
df = pd.DataFrame(rows)
df.to_csv(out / "split_battery.csv", index=False)
print(f"stream options battery: {int(df.ok.sum())}/{len(df)} ok, max rel err {df.rel_err.max():.2e}")
print(df[~df.ok].to_string(index=False))
