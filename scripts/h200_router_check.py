"""The Triton router GEMM on the H200 (NOTES.md v16): correctness and time against cuBLAS.

usage: python scripts/h200_router_check.py OUT_DIR   (CUDA) -> router_check.csv, router_time.csv
For the six Table 1 layer shapes (baseline and DeaMoE of Baseline-7B, DeepSeek-V3, Qwen3) and
1..200 tokens of bf16 input: the split-K partials summed against the fp32 matmul (relative
error), and the routing from them against deamoe.routing.route on those fp32 logits (same
expert sets up to exact ties, weights); then router + routing alone in a CUDA graph, cuBLAS
(F.linear, bf16 logits) vs the Triton partials, median of replays.
"""

import sys
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
import triton.testing

from deamoe.bench.layer_step import random_weights
from deamoe.config import table1_row
from deamoe.kernels.router_gemm import router_partials, split_plan
from deamoe.kernels.routing_topk import route_kernel
from deamoe.routing import route

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
checks, times = [], []
for model in ("Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B"):
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        w = random_weights(shape, "cuda", seed=3)["router"]
        for T in (1, 4, 13, 64, 128, 200):
            x = torch.randn(T, shape.h, device="cuda", dtype=torch.bfloat16)
            parts = router_partials(x, w)
            exact = x.float() @ w.float().T
            rel = ((parts.sum(0) - exact).norm() / exact.norm()).item()
            ids, weights = route_kernel(shape, parts)
            ref_ids, ref_w = route(shape, parts.sum(0))
            same = bool(torch.equal(ids.sort(1).values, ref_ids.sort(1).values))
            w_err = (weights.sort(1).values - ref_w.sort(1).values).abs().max().item()
            ok = rel < 1e-4 and same and w_err < 1e-4
            checks.append({"model": model, "kind": shape.kind, "tokens": T,
                           "splits": split_plan(T, shape.n_expert, shape.h)[0], "rel_err": rel,
                           "same_sets": same, "max_w_err": w_err, "ok": ok})
            if T in (4, 16, 64, 128) or T == 13:
                cublas = triton.testing.do_bench_cudagraph(
                    lambda: route_kernel(shape, F.linear(x, w)), rep=30, return_mode="median")
                ours = triton.testing.do_bench_cudagraph(
                    lambda: route_kernel(shape, router_partials(x, w)), rep=30,
                    return_mode="median")
                times.append({"model": model, "kind": shape.kind, "tokens": T,
                              "cublas_us": cublas * 1e3, "triton_us": ours * 1e3})
                print(times[-1], flush=True)
df = pd.DataFrame(checks)
df.to_csv(out / "router_check.csv", index=False)
pd.DataFrame(times).to_csv(out / "router_time.csv", index=False)
print(f"router check: {int(df.ok.sum())}/{len(df)} ok, max rel err {df.rel_err.max():.2e}, "
      f"max weight err {df.max_w_err.max():.2e}")
print(df[~df.ok].to_string(index=False))
