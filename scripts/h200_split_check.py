"""GPU correctness of split_launches (NOTES.md v13): the battery's cases with the groups in 2
and 4 parts on parallel CUDA streams, bf16 against the float32 reference.

usage: python scripts/h200_split_check.py OUT_DIR   (CUDA) -> split_battery.csv
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.config import table1_row
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fused_moe import MoETiles

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def tiles(shape, parts):
    return (DeaMoETiles(split_launches=parts) if shape.kind == "deamoe"
            else MoETiles(split_launches=parts))


rows = []
for parts in (2, 4):
    for name, shape in small_shapes().items():
        for seed, tokens in enumerate((1, 37, 256)):
            for pattern in PATTERNS:
                r = check_case(Case(name, shape, tokens, pattern, seed), "cuda", torch.bfloat16,
                               tiles=tiles(shape, parts))
                rows.append({**r, "split_launches": parts})
for model in ("Baseline-7B", "Qwen3-235B-A22B", "DeepSeek-V3"):
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
        for parts in (2, 4):
            for case in (Case(model, shape, 13, "random", 33), Case(model, shape, 64, "empty", 2)):
                r = check_case(case, "cuda", torch.bfloat16, layer=layer, tiles=tiles(shape, parts))
                rows.append({**r, "split_launches": parts})
        del layer
        torch.cuda.empty_cache()
df = pd.DataFrame(rows)
df.to_csv(out / "split_battery.csv", index=False)
print(f"split battery: {int(df.ok.sum())}/{len(df)} ok, max rel err {df.rel_err.max():.2e}")
print(df[~df.ok].to_string(index=False))
