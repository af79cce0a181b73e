"""DeaMoE's dense department up-projection on block-scaled FP8 weights (w8a8) through cuBLAS.

With `DeaMoETiles.dense_dept_up` GEMM 1 runs for every (token, department): no routing, so it is
a plain GEMM of x against all departments' matrices at once, which cuBLAS's FP8 GEMM with
block-wise scales (torch._scaled_mm: A in 1 x 128 groups, B in 128 x 128 blocks -- the
checkpoint's own format, the numbers of the grouped GEMM's '-pq' tiles) streams closer to the
read roofline than our grouped GEMM's tiles at >= 128 tokens, where these GEMMs are bound by the
per-block scale work of the main loop rather than by memory.  Measured alone on an H100 80GB HBM3
(docs/kernels-fp8.md, `reports/measured/h100/fp8_dept_gemm_probe.csv`): at 128 tokens the stage with
one GEMM over all departments took 94.9 us for DeepSeek-V3 and 48.0 us for Qwen3-235B-A22B
against the Triton pick's 113.3 and 65.5 us (x's quantiser in both); at 16-64 tokens the Triton
tiles are level or faster.  Here the gate and the up halves are one GEMM each: the weights are
two stacks, and one GEMM would need a stacked copy of both.  The microbenchmark's search tries
it per point (bench.search.dense_up_cublas_pass).

The department output a1 is then stored planar: the gate halves of every (token, department) row
first, [T x n_dept, h_ffn], then the up halves -- each is one GEMM's [T, n_dept x h_ffn] output
as cuBLAS writes it, with no copy -- and the expert up-projection reads the up half at
T x n_dept x h_ffn elements on (its a_up_off; interleaved rows put it at h_ffn).  Launches: x's
quantiser (scales stored group by group, as cuBLAS reads them), two GEMMs (gate, up) and the
operator in place: four, where the Triton stage has two."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deamoe.kernels.fp8 import Fp8Weight
from deamoe.kernels.fp8_quant import quantize_groups
from deamoe.kernels.gemm_spec import ACTS

def _apply_operator(a1: torch.Tensor, name: str) -> None:
    """The layer's operator sigma (deamoe.model.layers.operator) on a1, in place."""
    if name == "none":
        return
    if name == "silu":  # the same F.silu, in place: no second buffer of a1's size to stream
        F.silu(a1, inplace=True)
        return
    from deamoe.model.layers import operator

    a1.copy_(operator(name)(a1))


def format_misfit(h: int, h_ffn: int, fmt, on_cuda: bool = True) -> str | None:
    """Why department weights [.., h_ffn, h] in `fmt` (an Fp8Format or None) cannot take the
    cuBLAS stage (None: they can)."""
    if fmt is None:
        return "it needs block-scaled FP8 department weights (w8a8)"
    if fmt.activations != "fp8":
        return f"it needs w8a8 weights (activations quantised), not {fmt.precision}"
    # cuBLAS's block-wise scaling takes exactly these blocks (on the CPU torch has no block-wise
    # FP8 GEMM at all: there the tests stand in for it, on smaller blocks)
    if on_cuda and (fmt.block_n, fmt.block_k) != (128, 128):
        return f"cuBLAS's block-wise scaling takes 128 x 128 weight blocks, not {fmt.block_n} x {fmt.block_k}"
    if h_ffn % fmt.block_n or h % fmt.block_k or h % 16:
        return (f"h_ffn {h_ffn} and h {h} must be multiples of the {fmt.block_n} x {fmt.block_k} "
                "scale blocks")
    return None


def misfit(x: torch.Tensor, dept_gate, dept_up, operator: str) -> str | None:
    """Why the dense department up-projection cannot run through cuBLAS here (None: it can)."""
    if operator not in ACTS:  # the operators the kernels apply in their epilogues
        return f"operator {operator} is not applied after cuBLAS's GEMM ({', '.join(ACTS)})"
    fp8 = isinstance(dept_gate, Fp8Weight) and isinstance(dept_up, Fp8Weight)
    if fp8 and dept_up.fmt != dept_gate.fmt:
        return "its gate and up weights must share one FP8 format"
    why = format_misfit(dept_gate.shape[-1], dept_gate.shape[-2], dept_gate.fmt if fp8 else None,
                        x.is_cuda)
    if why:
        return why
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return f"cuBLAS writes bf16, fp16 or fp32, not the layer's {x.dtype}"
    return None


def planar_rows(tokens: int, n_dept: int, f: int, like: torch.Tensor) -> torch.Tensor:
    """The department output as the cuBLAS stage writes it: [2 x tokens x n_dept, f], the gate
    halves of every (token, department) row, then their up halves."""
    return torch.empty(2 * tokens * n_dept, f, dtype=like.dtype, device=like.device)


def dense_dept_up(x: torch.Tensor, dept_gate: Fp8Weight, dept_up: Fp8Weight, a1: torch.Tensor,
                  operator: str) -> torch.Tensor:
    """a1 (planar_rows) = sigma(Wg[j] x_t) and sigma(Wu[j] x_t) for every token t and department
    j: x quantised in groups of the weights' block_k, one GEMM per half, sigma in place."""
    why = misfit(x, dept_gate, dept_up, operator)
    if why:
        raise ValueError(f"fp8_dense_up: {why}")
    tokens = x.shape[0]
    n_dept, f, k = dept_gate.shape
    fmt = dept_gate.fmt
    if a1.shape != (2 * tokens * n_dept, f) or not a1.is_contiguous():
        raise ValueError(f"fp8_dense_up: a1 {tuple(a1.shape)} is not planar_rows "
                         f"[{2 * tokens * n_dept}, {f}]")
    q, scales = quantize_groups(x.contiguous(), fmt.block_k, by_group=True)
    halves = a1.view(2, tokens, n_dept * f)
    for half, w in zip(halves, (dept_gate, dept_up)):
        # B = W^T [k, n_dept x f] (W's rows, K-major: what cuBLAS wants of B); its block scales
        # [k / block_k, n_dept x f / block_n], the same transpose of the stored ones
        torch._scaled_mm(q, w.q.view(n_dept * f, k).t(), scales,
                         w.scale.view(n_dept * f // fmt.block_n, -1).t(), out_dtype=x.dtype,
                         out=half)
    _apply_operator(a1, operator)
    return a1
