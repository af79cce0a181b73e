"""Per-token mixes of a few wide rows: out[t] = m[t] @ rows[t], m [T, A, B] small (A, B <= 16),
rows [T, B, d] with d in the hundreds; and its adjoint in m, out[t] = g[t] @ rows[t]^T.

DeaMoE's fast path sums each (token, department) pair's expert rows with a one-hot or weighted
[T, k, slots] matrix: memory-bound work (each row read once, each result written once).
torch.bmm on these shapes is slow: on the H200, at DeaMoE's training shape (32,768 tokens,
[5 x 8] @ [8 x 384], bf16) it took 0.28 ms with a contiguous m and 1.17 ms with the transposed
m the callers pass, where reading and writing the operands takes 0.068 ms at the H200's
bandwidth.  The Triton kernel here (one token's whole row block per program, two warps,
float32 accumulation, float64 for float64 rows) took 0.088 ms (78% of that bound; with a
128-wide block it took 0.18 ms).  It runs eager and in compiled layers, as a custom op
(deamoe.model.triton_ops): the compiled DeaMoE layer took 8.18 ms with it, 9.71 ms with bmm
(H200, docs/training-h200.md).  The adjoint in m (`dots`, a reduction over d) is torch.bmm: 0.22 ms
there, faster than a per-token Triton reduction (0.91 ms).
"""

from __future__ import annotations

import torch

from deamoe.model.triton_ops import pow2, register_op

try:
    import triton
    import triton.language as tl
except ImportError:  # the checkpoint's model code runs without Triton (CPU, torch.bmm)
    triton = None

# A whole row of d <= 512 per program (d = h_ffn: 384 at the gpu profile's shape); wider rows in
# blocks of 512, which keep the [A, block] float32 accumulator in two warps' registers.
_MAX_BLOCK_D = 512

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


def _launch(m: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    (T, A, B), D = m.shape, rows.shape[-1]
    out = rows.new_empty(T, A, D)
    if out.numel() == 0:  # no program to launch
        return out
    block = min(pow2(D), _MAX_BLOCK_D)
    _mix_kernel[(T, triton.cdiv(D, block))](
        m, rows, out, D, *m.stride(), rows.stride(0), rows.stride(1), out.stride(0), out.stride(1),
        A=A, B=B, BA=pow2(A), BLOCK_D=block, F64=rows.dtype == torch.float64, num_warps=2)
    return out


def _empty_like_result(m: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return rows.new_empty(m.shape[0], m.shape[1], rows.shape[-1])


_MIX_OP = register_op("deamoe::mix_rows", _launch, _empty_like_result) if triton is not None else None


def mix(m: torch.Tensor, rows: torch.Tensor, use_triton: bool | None = None) -> torch.Tensor:
    """m [T, A, B] (any strides, rows' dtype), rows [T, B, d] -> [T, A, d] in rows' dtype.
    The Triton kernel runs by default on CUDA (eager and compiled); use_triton forces the choice
    (True on CPU runs it under TRITON_INTERPRET=1)."""
    if use_triton is None:
        use_triton = rows.is_cuda
    if _MIX_OP is None or not use_triton:
        return torch.bmm(m, rows)
    return _MIX_OP(m, rows)


def dots(g: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """g [T, A, d], rows [T, B, d] -> [T, A, B]: out[t, a, b] = <g[t, a], rows[t, b]>."""
    return torch.bmm(g, rows.transpose(1, 2))


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
        g_m = dots(grad, rows) if ctx.needs_input_grad[0] else None
        g_rows = mix(m.transpose(1, 2), grad, ctx.use_triton) if ctx.needs_input_grad[1] else None
        return g_m, g_rows, None
