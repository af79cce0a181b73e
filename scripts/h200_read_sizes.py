"""Streaming-read bandwidth by read size (NOTES.md v11): what one launch of N bytes can reach.

usage: python scripts/h200_read_sizes.py OUT_DIR   (CUDA).  For read sizes (column mb, in MiB)
from 12.5 MiB to 4 GiB:
the streaming-read kernel (stream_read.py, each launch shape of the roofline benchmark) over
enough distinct buffers (>= 2 GB per replay, so nothing is served from L2), one launch per
buffer, in one CUDA graph; per-launch time = replay median / buffers.  The roofline is the large-
read limit; a GEMM of the same bytes cannot beat the same-size read, so read_sizes.csv bounds
what any kernel of that size could do, launch ramp and tail included.
"""

import math
import sys
from pathlib import Path

import pandas as pd
import torch
import triton

from deamoe.bench.layer_step import time_fn
from deamoe.kernels.stream_read import stream_read
from deamoe.kernels.stream_read_benchmark import VARIANTS
from deamoe.provenance import provenance

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rows = []
for mb in (12.5, 25, 50, 100, 200, 400, 800, 1600, 4096):
    n = int(mb * 2**20) // 2
    copies = max(1, math.ceil(2.0e9 / (2 * n)))
    bufs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    for block, unroll, warps in VARIANTS:
        def run():
            for b in bufs:
                stream_read(b, block, unroll, warps)
        us = time_fn(run, 30, copies).median_us
        rows.append({"mb": mb, "bytes": 2 * n, "block": block, "unroll": unroll, "num_warps": warps,
                     "copies": copies, "us": us, "tbps": 2 * n / us / 1e6})
    best = max((r for r in rows if r["mb"] == mb), key=lambda r: r["tbps"])
    print(f"{mb:7.1f} MB x{copies:3d}: best {best['us']:9.1f} us  {best['tbps']:.3f} TB/s", flush=True)
    del bufs
    torch.cuda.empty_cache()
prov = provenance("cuda")
pd.DataFrame(rows).assign(gpu=prov["device"], torch=prov["torch"], triton=triton.__version__,
                          date=prov["date"], git_sha=prov["git_sha"]).to_csv(
    out / "read_sizes.csv", index=False)
