"""What the dense department up-projection reads beyond the routing's bytes (NOTES.md v52).

usage: python scripts/dense_overread.py [DRAWS]   (CPU, seconds)
With `dense_dept_up` DeaMoE's first GEMM runs for every (token, department) before the routing
is known, so it streams all n_dept departments' gate/up weights, while the ideal speedup counts
only the departments some token chose (`layer_step.step_bytes`).  For the three plotted Table 1
shapes at 4 / 8 / 16 tokens: the mean distinct departments over DRAWS routings of iid N(0, 1)
router logits (the microbenchmark's random-weight logits give the same byte means within 0.1%),
the bytes the dense GEMM reads beyond them, and their share of the layer's counted bytes
-> reports/measured/dense_overread.csv.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.analysis.budget import loaded_expert_params
from deamoe.bench.layer_step import step_bytes
from deamoe.config import table1_row
from deamoe.io import write_csv
from deamoe.routing import route

draws = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
rows = []
for model in ("Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B"):
    shape = table1_row(model).deamoe
    # the dense GEMM streams a department's gate and up: 2 of its backbone's 3 matrices, bf16
    dept_up_bytes = 2 * loaded_expert_params(shape, 0, 1) * 2 // 3
    gen = torch.Generator().manual_seed(0)
    for batch in (4, 8, 16):
        depts, nbytes = 0, 0
        for _ in range(draws):
            ids = route(shape, torch.randn(batch, shape.n_expert, generator=gen))[0]
            depts += torch.unique(ids // shape.experts_per_dept).numel()
            nbytes += step_bytes(shape, ids)
        depts, nbytes = depts / draws, nbytes / draws
        over = (shape.n_dept - depts) * dept_up_bytes
        rows.append({"model": model, "batch": batch, "draws": draws, "n_dept": shape.n_dept,
                     "k_dept": shape.k_dept, "distinct_depts": depts, "deamoe_bytes": nbytes,
                     "dense_overread_bytes": over, "overread_frac": over / nbytes})
        print(f"{model:16s} {batch:3d}  {depts:.3f} of {shape.n_dept} departments: the dense "
              f"GEMM reads {over / 1e6:6.2f} MB more ({100 * over / nbytes:.3f}% of the layer)")
out = Path("reports/measured/dense_overread.csv")
write_csv(out, pd.DataFrame(rows))
print(f"wrote {out}")
