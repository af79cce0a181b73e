"""The FP8 steps of the grouped GEMM's main loop (deamoe.kernels.grouped_gemm, W_FP8): the A tile
for an MMA with block-scaled FP8 weights, and one K block's scaled partial product.  The format
is deamoe.kernels.fp8's.

Weight-only (w8a16): the FP8 weight tile is widened to A's dtype in registers (exact), the MMA
runs in bf16 and the partial product is multiplied by the weights' block scales.  w8a8: the A
tile is quantised per row (one group of block_k columns per row: BLOCK_K = block_k) to e4m3, the
MMA runs on FP8 operands (Hopper's FP8 tensor cores; Triton's "fp8e4nv", K tile a multiple of
32) and the partial product is multiplied by both scales.  Under the interpreter (DOT_F32) the
operands go to float32, and a value is rounded to e4m3 by `round_e4m3` before its cast.
With A quantised before the GEMM (TileConfig.preq; deamoe.kernels.fp8_quant) the main loop loads
the e4m3 tile and its row scales instead (`prequantised_operands`).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_e4m3(v):
    """v (fp32) rounded to the nearest e4m3 value, ties to even, saturated at +-448: exactly
    what the GPU's conversion does.  Only under the interpreter, whose fp32 -> fp8 cast drops a
    rounding carry into the exponent (1.98 -> 1.0) and wraps past 448; it casts exact values
    right, so this rounds first."""
    a = tl.minimum(tl.abs(v), 448.0)
    exp = (a.to(tl.int32, bitcast=True) >> 23) & 0xFF
    step = ((tl.maximum(exp, 121) - 3) << 23).to(tl.float32, bitcast=True)  # 2^(max(e,-6)-3)
    q = ((a / step + 12582912.0) - 12582912.0) * step  # 1.5 * 2^23: round to an integer
    return tl.where(v < 0, -q, q)


@triton.jit
def quantize_rows(a, DOT_F32: tl.constexpr):
    """Each row of the tile a [R, C] as one group, in e4m3 with scale max(|row|, 1e-10) / 448, as
    vLLM's per_token_group_quant_fp8: (the e4m3 tile, its [R] float32 scales).  The one
    quantiser of activations, in the GEMM's main loop and before it (deamoe.kernels.fp8_quant)."""
    a = a.to(tl.float32)
    return quantize_with_absmax(a, tl.max(tl.abs(a), axis=1), DOT_F32)


@triton.jit
def quantize_with_absmax(a, amax, DOT_F32: tl.constexpr):
    """quantize_rows for a float32 tile a [R, C] whose rows' max |value| amax [R] is known
    (gathered by the GEMM that wrote it: deamoe.kernels.fp8_absmax): the same scale and e4m3
    values."""
    a_s = tl.maximum(amax, 1e-10) * (1.0 / 448.0)
    a = a / a_s[:, None]
    if DOT_F32:
        a = round_e4m3(a)
    else:
        a = tl.minimum(tl.maximum(a, -448.0), 448.0)
    return a.to(tl.float8e4nv), a_s


@triton.jit
def fp8_operands(a, A_FP8: tl.constexpr, DOT_F32: tl.constexpr):
    """The A tile for an MMA with FP8 weights, and its per-row scales (1 without A_FP8).
    A_FP8 (w8a8): each row of the tile is one group of GROUP_K columns (quantize_rows)."""
    if A_FP8:
        a, a_s = quantize_rows(a, DOT_F32)
    else:
        a_s = tl.full([a.shape[0]], 1.0, tl.float32)
    if DOT_F32:
        a = a.to(tl.float32)
    return a, a_s


@triton.jit
def scaled_mma(a, b, b_s, a_s, A_FP8: tl.constexpr, DOT_F32: tl.constexpr,
                SWAP_AB: tl.constexpr):
    """One K block's partial product with FP8 weights b [BLOCK_K, BLOCK_N], times the weights'
    block scales b_s [BLOCK_N] (and A's row scales a_s with A_FP8): FP8 operands on both sides
    (w8a8), or b widened to A's dtype in registers (weight-only, exact)."""
    if DOT_F32:
        b = b.to(tl.float32)
    elif not A_FP8:
        b = b.to(a.dtype)
    if SWAP_AB:
        part = tl.dot(tl.trans(b), tl.trans(a)) * b_s[:, None]
        if A_FP8:
            part = part * a_s[None, :]
    else:
        part = tl.dot(a, b) * b_s[None, :]
        if A_FP8:
            part = part * a_s[:, None]
    return part


@triton.jit
def prequantised_operands(a, scale_ptrs, row_ok, DOT_F32: tl.constexpr):
    """The A tile for an MMA with FP8 weights from A quantised before the GEMM: the loaded e4m3
    tile as it is (float32 under the interpreter) and its rows' scales for this K block."""
    a_s = tl.load(scale_ptrs, mask=row_ok, other=1.0)
    if DOT_F32:
        a = a.to(tl.float32)
    return a, a_s


@triton.jit
def store_quantised(v, c_ptrs, s_ptrs, c_mask, row_ok, FROM_BF16: tl.constexpr,
                    DOT_F32: tl.constexpr):
    """A GEMM's output tile v [BLOCK_M, one group of columns] stored as e4m3 with its rows'
    scales (TileConfig.qout): rounded to bf16 first where the layer's activations are bf16, so
    the numbers are those of storing it and quantising it in a launch after (fp8_quant)."""
    if FROM_BF16:
        v = v.to(tl.bfloat16).to(tl.float32)
    q, v_s = quantize_rows(v, DOT_F32)
    tl.store(c_ptrs, q, mask=c_mask)
    tl.store(s_ptrs, v_s, mask=row_ok)
