"""Does Triton 3.6's warp specialisation help the dense department GEMM on Hopper? (NOTES v28)

usage: python scripts/h200_ws_gemm.py OUT_DIR   (CUDA)
Qwen3-235B-A22B's dense department gate/up GEMM (x [T, 4096] against 8 x 1536 gate and up rows,
201 MB of bf16 weights, silu on both halves) as a plain dense GEMM with TMA loads of x and the
weights, K loop `tl.range(..., warp_specialize=WS)`, WS off and on, a few tiles; against cuBLAS
(one torch.mm over the stacked gate|up rows + silu) as what the MMA units allow. 4 weight copies
rotated in a CUDA graph, median -> ws_gemm.csv (with max relative error against float32).
A probe, not the layer's kernel: if WS wins here it becomes an option of grouped_gemm.py.
"""

import sys
import time
from pathlib import Path

import pandas as pd
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from deamoe.kernels.stage_benchmark import rotated_us

H, ROWS, COPIES = 4096, 8 * 1536, 4
CONFIGS = [(128, 64, 4, 8), (64, 64, 3, 4), (128, 64, 3, 4), (64, 128, 3, 4)]  # n, k, s, w
POINTS = {48: (64,), 64: (64,), 128: (64, 128)}  # tokens: BLOCK_M values


@triton.jit
def dense_gated_kernel(x_desc, wg_desc, wu_desc, c_ptr, M, N, K, stride_c,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       STAGES: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BLOCK_M)
    off_m = (pid % n_m) * BLOCK_M
    off_n = (pid // n_m) * BLOCK_N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=STAGES, warp_specialize=WS):
        a = x_desc.load([off_m, k])
        acc = tl.dot(a, wg_desc.load([off_n, k]).T, acc)
        acc_u = tl.dot(a, wu_desc.load([off_n, k]).T, acc_u)
    acc = acc * tl.sigmoid(acc)
    acc_u = acc_u * tl.sigmoid(acc_u)
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = c_ptr + rm[:, None] * stride_c + rn[None, :]
    tl.store(ptrs, acc.to(tl.bfloat16), mask=mask)
    tl.store(ptrs + N, acc_u.to(tl.bfloat16), mask=mask)


def launch(x, wg, wu, c, bm, bn, bk, stages, warps, ws):
    M, K = x.shape
    N = wg.shape[0]
    xd = TensorDescriptor(x, [M, K], [K, 1], [bm, bk])
    gd = TensorDescriptor(wg, [N, K], [K, 1], [bn, bk])
    ud = TensorDescriptor(wu, [N, K], [K, 1], [bn, bk])
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    dense_gated_kernel[grid](xd, gd, ud, c, M, N, K, c.stride(0), BLOCK_M=bm, BLOCK_N=bn,
                             BLOCK_K=bk, STAGES=stages, WS=ws, num_warps=warps)


def rel_err(c, ref) -> float:
    return ((c.float() - ref).norm() / ref.norm()).item()


def record(**row):  # the CSV after every row: a call cut by its time limit keeps what it timed
    rows.append(row)
    print(row, flush=True)
    pd.DataFrame(rows).to_csv(out / "ws_gemm.csv", index=False)


out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
t0 = time.time()
g = torch.Generator(device="cuda").manual_seed(0)
w = [torch.randn(2 * ROWS, H, device="cuda", dtype=torch.bfloat16, generator=g) * H ** -0.5
     for _ in range(COPIES)]  # gate rows then up rows, one tensor per copy (cuBLAS: one mm)
nbytes = 2 * ROWS * H * 2
rows = []
for T, bms in POINTS.items():
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = torch.nn.functional.silu(x.float() @ w[0].float().T)  # [T, 2 * ROWS]
    c = torch.empty(T, 2 * ROWS, device="cuda", dtype=torch.bfloat16)

    def cublas(i):
        torch.nn.functional.silu(torch.mm(x, w[i].T, out=c), inplace=True)
    cublas(0)
    err = rel_err(c, ref)
    us = rotated_us(cublas, COPIES)
    record(tokens=T, impl="cublas mm + silu", block_m=0, tile="", ws=False, us=us,
           tbps=nbytes / (us * 1e-6) / 1e12, rel_err=err)
    for bm in bms:
        for bn, bk, stages, warps in CONFIGS:
            for ws in (False, True):
                name = f"n{bn}-k{bk}-w{warps}-s{stages}"
                try:
                    def run(i):
                        launch(x, w[i][:ROWS], w[i][ROWS:], c, bm, bn, bk, stages, warps, ws)
                    c.fill_(float("nan"))
                    run(0)
                    torch.cuda.synchronize()
                    err = rel_err(c, ref)
                    us = rotated_us(run, COPIES)
                except Exception as exc:  # noqa: BLE001 - a config that does not compile is listed
                    print(T, bm, name, ws, type(exc).__name__, str(exc).splitlines()[0][:160])
                    record(tokens=T, impl="triton", block_m=bm, tile=name, ws=ws,
                           us=float("nan"), tbps=float("nan"), rel_err=float("nan"),
                           error=type(exc).__name__)
                    continue
                record(tokens=T, impl="triton", block_m=bm, tile=name, ws=ws, us=us,
                       tbps=nbytes / (us * 1e-6) / 1e12, rel_err=err)
df = pd.DataFrame(rows)
print(df.pivot_table(index=["tokens", "block_m", "tile"], columns="ws", values="us").round(1)
      .to_string())
print(f"done ({time.time() - t0:.0f} s)")
