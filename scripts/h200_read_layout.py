"""Does a weight matrix's row length set how fast its tiles stream?  (NOTES.md v33; CUDA)

usage: python scripts/h200_read_layout.py OUT_DIR [--gib 2.4]
Reads E stacked [N, K] bf16 matrices (E chosen so they fill --gib) tile by tile, as the grouped
GEMM streams its weights: one program per (matrix, BLOCK_N rows), a pipelined loop over K
loading [BLOCK_N, BLOCK_K] boxes by TMA (two matrices per program when gated, as w13 and
DeaMoE's expert_up read gate and up), summing them so no load can be dropped.  Layouts:
`rows` (row-major [N, K], what the layers use) and `tiles` (each [BLOCK_N, BLOCK_K] box stored
contiguously).  Shapes: the Table 1 expert matrices of DeaMoE (1536 x 1536) and the baselines
(Qwen3 1536 x 4096 / 4096 x 1536, DeepSeek-V3 2048 x 7168 / 7168 x 2048).  Writes
read_layout.csv (TB/s per shape, layout, tile) and the streaming-read roofline beside it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tile_read_kernel(a_desc, b_desc, out_ptr, KB, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      TILED: tl.constexpr, GATED: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for kb in tl.range(0, KB, num_stages=STAGES):
        if TILED:  # box (pid, kb) stored contiguously: row (pid * KB + kb) * BLOCK_N, column 0
            row = (pid * KB + kb) * BLOCK_N
            col = 0
        else:
            row = pid * BLOCK_N
            col = kb * BLOCK_K
        acc += tl.sum(a_desc.load([row, col]).to(tl.float32), axis=0)
        if GATED:
            acc += tl.sum(b_desc.load([row, col]).to(tl.float32), axis=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def tile_read(a, b, n: int, k: int, block_n: int, block_k: int, tiled: bool, stages: int,
              warps: int):
    """Stream the [E * n, k] matrices a (and b when gated) box by box; partial sums out."""
    rows = a.numel() // k
    if tiled:  # the same bytes viewed as [E * n/bn * k/bk * bn, bk]
        shape2d = [a.numel() // block_k, block_k]
    else:
        shape2d = [rows, k]
    descs = [TensorDescriptor(t, shape2d, [shape2d[1], 1], [block_n, block_k])
             for t in (a, b if b is not None else a)]
    grid = (rows // block_n,)
    out = torch.empty(grid[0], dtype=torch.float32, device=a.device)
    _tile_read_kernel[grid](descs[0], descs[1], out, k // block_k, BLOCK_N=block_n,
                            BLOCK_K=block_k, TILED=tiled, GATED=b is not None, STAGES=stages,
                            num_warps=warps)
    return out


SHAPES = [("DeaMoE expert 1536x1536", 1536, 1536), ("Qwen3 w13 1536x4096", 1536, 4096),
          ("Qwen3 w2 4096x1536", 4096, 1536), ("DeepSeek-V3 w13 2048x7168", 2048, 7168),
          ("DeepSeek-V3 w2 7168x2048", 7168, 2048)]
TILES = [(128, 128, 3, 4, True), (128, 128, 3, 4, False), (64, 64, 3, 4, False),
         (64, 128, 4, 4, False)]  # (block_n, block_k, stages, warps, gated)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gib", type=float, default=2.4, help="bytes streamed per launch")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from deamoe.kernels.stream_read_benchmark import measure_read_roofline

    roof = measure_read_roofline()
    print(f"roofline {roof['peak_read_tbps']:.3f} TB/s", flush=True)
    rows = []
    for label, n, k in SHAPES:
        per = n * k * 2
        for block_n, block_k, stages, warps, gated in TILES:
            mats = 2 if gated else 1
            e = max(1, int(args.gib * 2**30 / (per * mats)))
            a = torch.randn(e * n, k, dtype=torch.bfloat16, device="cuda")
            b = torch.randn_like(a) if gated else None
            nbytes = a.numel() * 2 * mats
            for tiled in (False, True):
                fn = lambda: tile_read(a, b, n, k, block_n, block_k, tiled, stages, warps)  # noqa: E731
                ms = triton.testing.do_bench_cudagraph(fn, rep=200, return_mode="median")
                row = {"shape": label, "n": n, "k": k, "layout": "tiles" if tiled else "rows",
                       "tile": f"n{block_n}-k{block_k}-w{warps}-s{stages}"
                       + ("-gated" if gated else ""), "matrices": e, "bytes": nbytes,
                       "us": ms * 1e3, "tbps": nbytes / ms / 1e9,
                       "peak_read_tbps": roof["peak_read_tbps"],
                       "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__}
                rows.append(row)
                print(f"{label:28s} {row['tile']:22s} {row['layout']:5s} {row['tbps']:.3f} TB/s",
                      flush=True)
            del a, b
            torch.cuda.empty_cache()
            pd.DataFrame(rows).to_csv(args.out / "read_layout.csv", index=False)


if __name__ == "__main__":
    main()
