"""Router logits for decoding: x [T, h] @ W [E, h]^T as split-K partial sums, in one launch.

At decode sizes the router GEMM is latency, not bytes (0.5-12 MB of weights): cuBLAS runs it as
a split-K GEMM plus a reduce kernel (two launches, 5.7-7 us on the H200 for the Table 1 shapes,
NOTES.md v16), with 4x1 thread-block clusters that wait for free SMs beside DeaMoE's dense
department GEMM (v14 part 4).  This kernel writes the split-K partials [S, T, E] in fp32 with
plain CTAs, and the routing kernel (`routing_topk`) sums them as it loads them -- so no reduce
launch and no zeroed buffer.  Used for both layers alike (`deamoe.bench.layer_step`).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
BLOCK_N, BLOCK_K = 32, 64
TARGET_PROGRAMS = 128  # about one per SM of an H100/H200
MIN_K_PER_SPLIT = 256


@triton.jit(do_not_specialize=["T", "k_per_split"])
def _router_gemm_kernel(x_ptr, w_ptr, out_ptr, T, E, K, k_per_split, stride_xt, stride_we,
                        stride_os, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr):
    pid_n, pid_s, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok, n_ok = offs_m < T, offs_n < E
    k_lo = pid_s * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        a = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xt + offs_k[None, :],
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + offs_n[None, :].to(tl.int64) * stride_we + offs_k[:, None],
                    mask=n_ok[None, :] & k_ok[:, None], other=0.0)
        if DOT_F32:  # interpreter only: its bf16 tl.dot is wrong (triton 3.9), fp32 is exact
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b.to(a.dtype), acc)
    out = out_ptr + pid_s * stride_os + offs_m[:, None].to(tl.int64) * E + offs_n[None, :]
    tl.store(out, acc, mask=m_ok[:, None] & n_ok[None, :])


def split_plan(T: int, E: int, K: int) -> tuple[int, int, int]:
    """(splits, k_per_split, block_m): about TARGET_PROGRAMS programs, >= MIN_K_PER_SPLIT of K
    each (a multiple of BLOCK_K), all tokens in one block up to 64 (more: blocks of 64)."""
    block_m = min(64, max(16, triton.next_power_of_2(max(T, 1))))
    tiles = triton.cdiv(E, BLOCK_N) * triton.cdiv(max(T, 1), block_m)
    splits = max(1, min(TARGET_PROGRAMS // tiles, K // MIN_K_PER_SPLIT))
    k_per_split = triton.cdiv(triton.cdiv(K, splits), BLOCK_K) * BLOCK_K
    return triton.cdiv(K, k_per_split), k_per_split, block_m


def router_partials(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[S, T, E] fp32 partial logits whose sum over S is x @ weight^T (S from `split_plan`)."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"router_partials: x {tuple(x.shape)} vs weight {tuple(weight.shape)} "
                         "(want [T, h] and [E, h])")
    x, weight = x.contiguous(), weight.contiguous()
    T, K = x.shape
    E = weight.shape[0]
    splits, k_per_split, block_m = split_plan(T, E, K)
    out = torch.empty(splits, T, E, dtype=torch.float32, device=x.device)
    if T == 0:
        return out
    grid = (triton.cdiv(E, BLOCK_N), splits, triton.cdiv(T, block_m))
    _router_gemm_kernel[grid](x, weight, out, T, E, K, k_per_split, x.stride(0), weight.stride(0),
                              out.stride(0), BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                              DOT_F32=_INTERPRETING, num_warps=4, num_stages=3)
    return out
