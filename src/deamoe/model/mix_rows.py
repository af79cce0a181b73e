"""Per-token mixes of a few wide rows: out[t] = m[t] @ rows[t], m [T, A, B] small (A, B <= 16),
rows [T, B, d] with d in the hundreds; and its adjoint in m, out[t] = g[t] @ rows[t]^T.

DeaMoE's fast path sums each (token, department) pair's expert rows with a one-hot or weighted
[T, k, slots] matrix: memory-bound work (each row read once, each result written once).  Eager,
torch.bmm on these shapes and strides is slow; a Triton kernel (one token and a block of d per
program, float32 accumulation, float64 for float64 rows) took the H200's eager DeaMoE layer step
from 14.99 to 12.47 ms.  `_triton` says where it runs instead of torch.bmm.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the checkpoint's model code runs without Triton (CPU, torch.bmm)
    triton = None

_BLOCK_D = 128

if triton is not None:

    @triton.jit
    def _mix_kernel(m_ptr, r_ptr, o_ptr, D, s_mt, s_ma, s_mb, s_rt, s_rb, s_ot, s_oa,
                    A: tl.constexpr, B: tl.constexpr, BA: tl.constexpr, BLOCK_D: tl.constexpr,
                    F64: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        a = tl.arange(0, BA)
        if F64:
            acc = tl.zeros((BA, BLOCK_D), dtype=tl.float64)
        else:
            acc = tl.zeros((BA, BLOCK_D), dtype=tl.float32)
        for b in tl.static_range(B):
            mb = tl.load(m_ptr + t * s_mt + a * s_ma + b * s_mb, mask=a < A, other=0.0).to(acc.dtype)
            row = tl.load(r_ptr + t * s_rt + b * s_rb + d, mask=d < D, other=0.0).to(acc.dtype)
            acc += mb[:, None] * row[None, :]
        out = o_ptr + t * s_ot + a[:, None] * s_oa + d[None, :]
        tl.store(out, acc.to(o_ptr.dtype.element_ty), mask=(a[:, None] < A) & (d[None, :] < D))

    @triton.jit
    def _dots_kernel(g_ptr, r_ptr, o_ptr, D, s_gt, s_ga, s_rt, s_rb, s_ot, s_oa, s_ob,
                     A: tl.constexpr, B: tl.constexpr, BA: tl.constexpr, BB: tl.constexpr,
                     BLOCK_D: tl.constexpr, F64: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        a = tl.arange(0, BA)
        b = tl.arange(0, BB)
        if F64:
            acc = tl.zeros((BA, BB), dtype=tl.float64)
        else:
            acc = tl.zeros((BA, BB), dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            d = d0 + tl.arange(0, BLOCK_D)
            g = tl.load(g_ptr + t * s_gt + a[:, None] * s_ga + d[None, :],
                        mask=(a[:, None] < A) & (d[None, :] < D), other=0.0).to(acc.dtype)
            r = tl.load(r_ptr + t * s_rt + b[:, None] * s_rb + d[None, :],
                        mask=(b[:, None] < B) & (d[None, :] < D), other=0.0).to(acc.dtype)
            acc += tl.sum(g[:, None, :] * r[None, :, :], axis=2)
        out = o_ptr + t * s_ot + a[:, None] * s_oa + b[None, :] * s_ob
        tl.store(out, acc.to(o_ptr.dtype.element_ty), mask=(a[:, None] < A) & (b[None, :] < B))


def _triton(rows: torch.Tensor, use_triton: bool | None) -> bool:
    """By default the kernel runs on CUDA outside torch.compile.  Under torch.compile the bmm is
    kept: there inductor hands cuBLAS contiguous operands, and the H200 measured the compiled
    DeaMoE layer (gpu-large, 32k tokens, fwd+bwd) at 9.51 ms with bmm, 9.74 ms with the kernel;
    eager it is the other way round (14.99 ms with bmm, 12.47 ms with the kernel)."""
    if use_triton is None:
        use_triton = rows.is_cuda and not torch.compiler.is_compiling()
    return triton is not None and use_triton


def _pow2(n: int) -> int:
    return max(2, 1 << (n - 1).bit_length())


def mix(m: torch.Tensor, rows: torch.Tensor, use_triton: bool | None = None) -> torch.Tensor:
    """m [T, A, B] (any strides, rows' dtype), rows [T, B, d] -> [T, A, d] in rows' dtype."""
    if not _triton(rows, use_triton):
        return torch.bmm(m, rows)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    (T, A, B), D = m.shape, rows.shape[-1]
    out = rows.new_empty(T, A, D)
    _mix_kernel[(T, triton.cdiv(D, _BLOCK_D))](
        m, rows, out, D, *m.stride(), rows.stride(0), rows.stride(1), out.stride(0), out.stride(1),
        A=A, B=B, BA=_pow2(A), BLOCK_D=_BLOCK_D, F64=rows.dtype == torch.float64, num_warps=2)
    return out


def dots(g: torch.Tensor, rows: torch.Tensor, use_triton: bool | None = None) -> torch.Tensor:
    """g [T, A, d], rows [T, B, d] -> [T, A, B]: out[t, a, b] = <g[t, a], rows[t, b]>."""
    if not _triton(rows, use_triton):
        return torch.bmm(g, rows.transpose(1, 2))
    g = g if g.stride(-1) == 1 else g.contiguous()
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    (T, A, D), B = g.shape, rows.shape[1]
    out = rows.new_empty(T, A, B)
    _dots_kernel[(T,)](
        g, rows, out, D, g.stride(0), g.stride(1), rows.stride(0), rows.stride(1), *out.stride(),
        A=A, B=B, BA=_pow2(A), BB=_pow2(B), BLOCK_D=64, F64=rows.dtype == torch.float64)
    return out


class Mix(torch.autograd.Function):
    """`mix` with its gradients: rows' is mix(m^T, grad), m's is dots(grad, rows)."""

    @staticmethod
    def forward(ctx, m, rows, use_triton=None):
        ctx.save_for_backward(m, rows)
        ctx.use_triton = use_triton
        return mix(m, rows, use_triton)

    @staticmethod
    def backward(ctx, grad):
        m, rows = ctx.saved_tensors
        g_m = dots(grad, rows, ctx.use_triton) if ctx.needs_input_grad[0] else None
        g_rows = mix(m.transpose(1, 2), grad, ctx.use_triton) if ctx.needs_input_grad[1] else None
        return g_m, g_rows, None
