"""Where the layer head's time goes (NOTES.md v24): router GEMM, routing kernel (by warps) and
align (by task), each alone in a CUDA graph, for the baseline and DeaMoE shapes of the three
plotted models, on the H200.

usage: python scripts/h200_head_parts.py OUT_DIR [TOKENS ...]   (CUDA) -> head_parts.csv
The v20 timelines show DeaMoE's routing kernel at 6-7 us (7B) against 2.6 for the baseline's
top-k at every batch size, and its align at 8.3 us against 4.8 at 128 tokens.
"""

import sys
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
import triton.testing

from deamoe.config import table1_row
from deamoe.kernels import routing_topk
from deamoe.kernels.align_benchmark import align_launches

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
tokens_list = [int(a) for a in sys.argv[2:]] or [4, 64, 128]
rows = []


def bench(fn):
    return triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median") * 1e3


for model in ("Baseline-7B", "Qwen3-235B-A22B", "DeepSeek-V3"):
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        router = torch.randn(shape.n_expert, shape.h, device="cuda", dtype=torch.bfloat16)
        for T in tokens_list:
            x = torch.randn(T, shape.h, device="cuda", dtype=torch.bfloat16)
            logits = F.linear(x, router)
            ids, _ = routing_topk.route_kernel(shape, logits)
            parts = {"router_gemm": lambda: F.linear(x, router)}
            for warps in (None, 1, 2, 4, 8):
                def route(warps=warps):
                    routing_topk.NUM_WARPS = warps
                    routing_topk.route_kernel(shape, logits)
                parts[f"route_w{warps or 'default'}"] = route
            parts.update(align_launches(shape, ids))
            for name, fn in parts.items():
                us = bench(fn)
                rows.append({"model": model, "kind": shape.kind, "tokens": T, "part": name,
                             "us": us})
                print(f"{model:16s} {shape.kind:6s} {T:4d} {name:20s} {us:7.2f} us", flush=True)
            routing_topk.NUM_WARPS = None
        pd.DataFrame(rows).to_csv(out / "head_parts.csv", index=False)
