"""Per-token sums of gathered rows: out[t] = sum over s < S of rows[idx[t * S + s]].

The fast FFN path moves every token's S rows (its k expert results, or DeaMoE's k_dept
department results) from the grouped layout back to the token in one such sum: the combine at
the end of each layer's forward, and the sum of a token's S copies in the dispatch's backward.
Memory-bound work: each gathered row is read once and each result written once.  Inductor fuses
index_select + sum into one kernel, which on the H200 at the gpu profile's large shape
(32,768 tokens x 8 rows of 1,024, bf16) took about 0.63 ms, about 20% of the bandwidth bound
(torch.profiler, docs/training-h200.md).  The Triton kernel here reads each of a token's rows as
one contiguous block per program and accumulates in float32 (float64 for float64 rows): 0.150 ms
there (87% of the bound), 0.575 ms for rows of 4,096 (inductor 4.31 ms).  It is
a torch.library custom op (deamoe.model.triton_ops), so that compiled layers call it as it is.
On CPU (and without Triton) the sum is index_select + sum.
"""

from __future__ import annotations

import torch

from deamoe.model.triton_ops import pow2, register_op

try:
    import triton
    import triton.language as tl
except ImportError:  # the checkpoint's model code runs without Triton (CPU, torch ops)
    triton = None

# One program per token and block of BLOCK_D columns: 1,024 bf16 columns are 16 bytes per thread
# of four warps, one vector load per row.
_MAX_BLOCK_D = 1024

if triton is not None:

    @triton.jit
    def _gather_sum_kernel(r_ptr, i_ptr, o_ptr, D, s_r, s_o, S: tl.constexpr, BLOCK_D: tl.constexpr,
                           F64: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        mask = d < D
        if F64:
            acc = tl.zeros((BLOCK_D,), dtype=tl.float64)
        else:
            acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for s in tl.static_range(S):
            row = tl.load(i_ptr + t * S + s).to(tl.int64)
            acc += tl.load(r_ptr + row * s_r + d, mask=mask, other=0.0).to(acc.dtype)
        tl.store(o_ptr + t * s_o + d, acc.to(o_ptr.dtype.element_ty), mask=mask)


def _reference(rows: torch.Tensor, idx: torch.Tensor, slots: int, dtype: torch.dtype) -> torch.Tensor:
    return rows.index_select(0, idx).view(-1, slots, rows.shape[-1]).sum(1, dtype=dtype)


def _launch(rows: torch.Tensor, idx: torch.Tensor, slots: int, dtype: torch.dtype) -> torch.Tensor:
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    idx = idx.contiguous()
    T, D = idx.numel() // slots, rows.shape[-1]
    out = rows.new_empty(T, D, dtype=dtype)
    if out.numel() == 0:  # no program to launch
        return out
    block = min(pow2(D, least=16), _MAX_BLOCK_D)
    _gather_sum_kernel[(T, triton.cdiv(D, block))](
        rows, idx, out, D, rows.stride(0), out.stride(0), S=slots, BLOCK_D=block,
        F64=rows.dtype == torch.float64, num_warps=4)
    return out


def _empty_result(rows: torch.Tensor, idx: torch.Tensor, slots: int, dtype: torch.dtype) -> torch.Tensor:
    return rows.new_empty(idx.numel() // slots, rows.shape[-1], dtype=dtype)


_GATHER_SUM_OP = register_op("deamoe::gather_sum", _launch, _empty_result) if triton is not None else None


def gather_sum(rows: torch.Tensor, idx: torch.Tensor, slots: int, dtype: torch.dtype | None = None,
               use_triton: bool | None = None) -> torch.Tensor:
    """rows [N, d], idx [T * slots] int64 (rows to read, token-major) -> [T, d] in `dtype`
    (default rows'), summed in float32 (float64 for float64 rows).  The Triton kernel runs by
    default on CUDA; use_triton forces the choice (True on CPU runs it under TRITON_INTERPRET=1)."""
    dtype = rows.dtype if dtype is None else dtype
    if use_triton is None:
        use_triton = rows.is_cuda
    if _GATHER_SUM_OP is None or not use_triton:
        return _reference(rows, idx, slots, dtype)
    return _GATHER_SUM_OP(rows, idx, slots, dtype)
