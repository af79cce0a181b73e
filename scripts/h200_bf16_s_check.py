"""Correctness of S in bf16 (deamoe_decode.S_BF16, on since v45) against fp32 S, on the GPU.

usage: python scripts/h200_bf16_s_check.py OUT_DIR
The battery's DeaMoE cases (the Table 1 shapes, random routing, poisoned buffers, fp32
reference) at 1, 13, 64 and 256 tokens in bf16, with S in fp32 (the default) and in bf16
-> bf16_s_check.csv.  CUDA only (Triton's interpreter has no bf16 atomics).
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.microbench import module_switches
from deamoe.config import TABLE1
from deamoe.kernels.battery import Case, build_layer, check_case

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rows = []
for model, row in TABLE1.items():
    shape = row.deamoe
    layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
    cases = [Case(model, shape, t, "random", seed=20 + t) for t in (1, 13, 64, 256)]
    for case in cases + [Case(model, shape, 64, "same", 1)]:
        for on in (False, True):
            with module_switches({"deamoe.kernels.deamoe_decode.S_BF16": on}):
                r = check_case(case, "cuda", torch.bfloat16, layer=layer)
            rows.append({**r, "s_bf16": on})
            print(f"{model:16s} {case.pattern:6s} {case.tokens:4d} S_BF16={int(on)} rel_err {r['rel_err']:.2e} "
                  f"{'ok' if r['ok'] else 'FAIL'}", flush=True)
    del layer
    torch.cuda.empty_cache()
pd.DataFrame(rows).to_csv(out / "bf16_s_check.csv", index=False)
