"""Correctness of the bf16 output sum (grouped_gemm.OUT_BF16; NOTES.md v47) on the GPU.

usage: python scripts/h200_out_bf16_check.py OUT_DIR
The full GPU battery (small shapes, all patterns, 1..256 tokens; the Table 1 shapes), both
layers in bf16 against the fp32 reference, with the switch on -> battery_out_bf16.csv.  CUDA
only (Triton's interpreter has no bf16 atomics).
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.microbench import module_switches
from deamoe.kernels.battery import full_battery

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
with module_switches({"deamoe.kernels.grouped_gemm.OUT_BF16": True}):
    df = pd.DataFrame(full_battery("cuda", torch.bfloat16, [1, 13, 64, 256]))
df.to_csv(out / "battery_out_bf16.csv", index=False)
bad = df[~df.ok]
print(f"battery with OUT_BF16: {len(df) - len(bad)}/{len(df)} ok, max rel err "
      f"{df.rel_err.max():.2e}")
print(df.groupby("kind").rel_err.max().to_string() if "kind" in df else "")
