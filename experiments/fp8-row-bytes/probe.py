"""Probe: how fast a GEMM-shaped weight read streams with each width of the rows' chunks a K
step reads.  Each program reads BLOCK_N rows x all K of a [rows, K] matrix in [BLOCK_N, BLOCK_K]
tiles (TMA or plain loads, num_stages deep), summing each tile's rows (so no load is dropped),
as the decode GEMM's programs read their weight tiles.  FP8 k128 tiles read 128 B of each row a
step where bf16 k128 tiles read 256 B: same K-steps, half the bytes.  Prints us and TB/s."""
import sys

import torch
import triton
import triton.language as tl

from deamoe.bench.layer_step import time_fn
from deamoe.kernels.stream_read import stream_read


@triton.jit
def tile_read(w, w_desc, out, K, stride, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              TMA: tl.constexpr, HALVES: tl.constexpr = 1):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if HALVES == 2:  # two boxes of BLOCK_K / 2 columns in one step (the descriptor's box)
            t = w_desc.load([pid * BLOCK_N, k0])
            acc += tl.sum(t.to(tl.float32), 1)
            t = w_desc.load([pid * BLOCK_N, k0 + BLOCK_K // 2])
        elif TMA:
            t = w_desc.load([pid * BLOCK_N, k0])
        else:
            t = tl.load(w + rows[:, None].to(tl.int64) * stride + k0 + offs_k[None, :])
        acc += tl.sum(t.to(tl.float32), 1)
    tl.store(out + rows, acc)


def run(mats, block_n, block_k, tma, stages, halves=1):
    from triton.tools.tensor_descriptor import TensorDescriptor

    rows, K = mats[0].shape
    outs = [torch.empty(rows, device="cuda", dtype=torch.float32) for _ in mats]
    descs = [TensorDescriptor(m, [rows, K], [K, 1], [block_n, block_k // halves]) if tma else m
             for m in mats]

    def fn():
        for m, d, o in zip(mats, descs, outs):
            tile_read[(rows // block_n,)](m, d, o, K, K, BLOCK_N=block_n, BLOCK_K=block_k,
                                          TMA=tma, HALVES=halves, num_warps=4, num_stages=stages)
    return time_fn(fn, 50, per_call=len(mats)).median_us


if sys.argv[1:] == ["halves"]:  # one [n, 256] box a step against two [n, 128] boxes
    for name, rows, K in (("Qwen3 dense", 8 * 2 * 1536, 4096), ("DSV3 dense", 8 * 2 * 2048, 7168)):
        mats = [torch.randn(rows, K, device="cuda").to(torch.float8_e4m3fn) for _ in range(4)]
        for block_n in (64, 128):
            for bk, halves in ((128, 1), (256, 1), (256, 2)):
                us = run(mats, block_n, bk, True, 4, halves)
                print(f"{name} fp8 n{block_n}-k{bk} boxes of {bk // halves}: {us:6.1f} us "
                      f"{mats[0].numel() / us / 1e6:5.2f} TB/s", flush=True)
        del mats
    sys.exit()
for name, rows, K in (("Qwen3 dense", 8 * 2 * 1536, 4096), ("DSV3 dense", 8 * 2 * 2048, 7168)):
    for dtype in (torch.float8_e4m3fn, torch.bfloat16):
        mats = [torch.randn(rows, K, device="cuda").to(dtype) for _ in range(4)]
        nbytes = mats[0].numel() * mats[0].element_size()
        roof = min(time_fn(lambda: stream_read(m), 50).median_us for m in mats[:1])
        print(f"{name} {str(dtype)[6:]:14s} {nbytes / 1e6:.0f} MB  stream_read {nbytes / roof / 1e6:.2f} TB/s",
              flush=True)
        for block_n in (64, 128):
            for block_k in (64, 128, 256):
                if block_k * mats[0].element_size() > 512:
                    continue
                for tma in (True, False):
                    for stages in (4,):
                        try:
                            us = run(mats, block_n, block_k, tma, stages)
                        except Exception as exc:
                            print(f"  n{block_n}-k{block_k} tma={tma} s{stages}: {type(exc).__name__}")
                            continue
                        print(f"  n{block_n}-k{block_k} ({block_k * mats[0].element_size()} B/row) "
                              f"tma={int(tma)} s{stages}: {us:7.1f} us {nbytes / us / 1e6:5.2f} TB/s",
                              flush=True)
        del mats
        torch.cuda.empty_cache()
