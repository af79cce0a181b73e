"""GPU check of the Triton routing kernel against deamoe.routing.route, and its time.

usage: python scripts/h200_routing_check.py OUT_DIR   (CUDA; writes routing_check.csv and
routing_time.csv).  Equality: every Table 1 shape (baseline top-k, DeaMoE soft and strict),
bias off/on, 1..256 tokens, fp32 logits (same sets, weights within 1e-5) and bf16 logits
(equal up to exact ties).  Time: the kernel vs the eager torch route, each alone in a CUDA graph.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import time_fn
from deamoe.config import TABLE1
from deamoe.kernels import routing_topk
from deamoe.kernels.routing_topk import compare_with_reference, route_kernel
from deamoe.routing import route

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rows, times = [], []
for model, row in TABLE1.items():
    shapes = [("baseline", row.baseline), ("deamoe", row.deamoe),
              ("deamoe-strict", row.deamoe.replace(dept_topk="strict"))]
    for kind, shape in shapes:
        g = torch.Generator(device="cuda").manual_seed(len(rows))
        for with_bias in (False, True):
            bias = 0.02 * torch.randn(shape.n_expert, generator=g, device="cuda") if with_bias else None
            for T in (1, 4, 13, 64, 128, 256):
                logits = 2 * torch.randn(T, shape.n_expert, generator=g, device="cuda")
                for dtype in (torch.float32, torch.bfloat16):
                    r = compare_with_reference(shape, logits.to(dtype), bias)
                    ok = r["ranked"] and r["distinct_ids"] and (
                        r["same_sets"] and r["max_w_err"] < 1e-5 if dtype == torch.float32 else r["tie_only"])
                    rows.append({"model": model, "kind": kind, "bias": with_bias,
                                 "dtype": str(dtype).split(".")[-1], **r, "ok": ok})
        if kind == "deamoe-strict":
            continue
        for T in (4, 16, 64, 128):
            logits = torch.randn(T, shape.n_expert, device="cuda", dtype=torch.bfloat16)
            for impl, fn, warps in (("triton", route_kernel, None), ("triton w1", route_kernel, 1),
                                    ("triton w2", route_kernel, 2), ("triton w4", route_kernel, 4),
                                    ("triton w8", route_kernel, 8), ("torch eager", route, None)):
                routing_topk.NUM_WARPS = warps
                t = time_fn(lambda: fn(shape, logits), 100)
                routing_topk.NUM_WARPS = None
                times.append({"model": model, "kind": kind, "tokens": T, "impl": impl,
                              "us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us})
df = pd.DataFrame(rows)
df.to_csv(out / "routing_check.csv", index=False)
tf = pd.DataFrame(times)
tf.to_csv(out / "routing_time.csv", index=False)
print(tf.pivot_table(index=["model", "kind", "tokens"], columns="impl", values="us").round(1).to_string())
bad = df[~df["ok"]]
print(bad.to_string() if len(bad) else "")
print(f"routing check: {len(df) - len(bad)}/{len(df)} ok")
