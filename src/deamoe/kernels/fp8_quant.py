"""Per-(row, group) e4m3 quantisation of a GEMM's activations in one launch before the GEMM, as
vLLM's per_token_group_quant_fp8 does for its FP8 block path: the grouped GEMM on a tile with
`preq` (deamoe.kernels.tile_config) then loads e4m3 A and its scales instead of quantising each
A tile in its main loop.  The numbers are the main loop's: scale = max(|group|, 1e-10) / 448,
q = a / scale rounded to e4m3 (deamoe.kernels.fp8.quantize_activations is the reference).
Every row of A is quantised, also rows its GEMM does not read (DeaMoE's expert up-projection
reads the chosen departments' rows of the department output; the others are never written, and
quantise to whatever they hold): one launch over the buffer, with no gather of the rows.
Where an up-projection's tile stores its output quantised ('-qo': QuantisedRows, groups of the
tile's BLOCK_N columns), or stores it with its absmax per row and group ('-qs': AbsmaxRows,
deamoe.kernels.fp8_absmax), the GEMM after it has no such launch; `gemm_operands` is where a
launch decides which of these its A and C are.  A launch here may also zero a run of absmax
slots per row (ZeroSlots) for a '-qs' GEMM after it, in the same programs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from deamoe.kernels import INTERPRETING
from deamoe.kernels.fp8 import FP8_MMA_MIN_K, Fp8Format, Fp8Weight, preq_groups_fit
from deamoe.kernels.fp8_absmax import AbsmaxRows, ZeroSlots, absmax_rows, group_fits
from deamoe.kernels.fp8_mma import quantize_rows
from deamoe.kernels.tile_config import TileConfig


# Rows per quantiser program: a program quantises a [QUANT_ROWS, group] tile (16 values a thread
# on 4 warps).  One program per (row, group), as vLLM's Triton quantiser launches, made tens of
# thousands of programs of 128 values each, which ran at ~0.6 TB/s alone (DeepSeek-V3's
# department output at 128 tokens, 1024 x 4096 values, 20.9 us on an H100); with 16 rows a
# program DeaMoE's FP8 layer is 0.3-3.1% faster (docs/kernels-fp8-search.md).  Beside another
# stream's GEMM a launch of a few hundred rows took 5-14 us at 4-16 tokens, latency rather than
# work, and the layer's times at those batches moved only 0.3-0.5%.
QUANT_ROWS = 16


@triton.jit
def quantize_groups_kernel(a_ptr, q_ptr, s_ptr, rows, stride_a, width, stride_sr, stride_sg,
                           z_ptr, stride_z, z_lo, z_n, GROUP: tl.constexpr, ROWS: tl.constexpr,
                           DOT_F32: tl.constexpr, Z_BLOCK: tl.constexpr):
    """One program per (ROWS rows, group of GROUP columns; the last group partial where width is
    not a multiple of GROUP, as the GEMM's masked last K block; the last rows masked).
    Z_BLOCK > 0: each program also zeroes its share (Z_BLOCK words a row) of the z_n float32
    words from column z_lo of its rows of z."""
    r = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None]
    grp = tl.program_id(1)
    cols = (grp * GROUP + tl.arange(0, GROUP))[None, :]
    row_ok = r < rows
    ok = row_ok & (cols < width)
    q, a_s = quantize_rows(tl.load(a_ptr + r * stride_a + cols, mask=ok, other=0.0), DOT_F32)
    tl.store(q_ptr + r * width + cols, q, mask=ok)
    tl.store(s_ptr + r * stride_sr + grp * stride_sg, a_s[:, None], mask=row_ok)
    if Z_BLOCK > 0:
        zc = (grp * Z_BLOCK + tl.arange(0, Z_BLOCK))[None, :]
        tl.store(z_ptr + r * stride_z + z_lo + zc, tl.zeros([ROWS, Z_BLOCK], tl.float32),
                 mask=row_ok & (zc < z_n))


def quantize_groups(a: torch.Tensor, group: int, launch: bool = True,
                    zero: ZeroSlots | None = None,
                    by_group: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [R, W] e4m3, scales [R, ceil(W / group)] float32) of a [R, W] (rows of unit column
    stride); zero: absmax slots of R rows this launch zeroes too.  launch=False: the buffers
    only (a compile-only GEMM launch).  by_group: the scales stored group by group (a view of a
    [groups, R] buffer), as cuBLAS's block-wise scaling reads them (fp8_dense_up)."""
    rows, width = a.shape
    if a.stride(-1) != 1:
        raise ValueError(f"quantize_groups: a [{rows}, {width}] needs rows of unit column stride")
    if zero is not None and (zero.slots.shape[0] != rows or zero.slots.stride(-1) != 1
                             or zero.slots.dtype != torch.float32):
        raise ValueError(f"quantize_groups: the slots to zero must be float32 rows of unit column "
                         f"stride, one per row of a ({rows})")
    n_groups = triton.cdiv(width, group)
    q = torch.empty(rows, width, dtype=torch.float8_e4m3fn, device=a.device)
    scales = (torch.empty(n_groups, rows, dtype=torch.float32, device=a.device).t() if by_group
              else torch.empty(rows, n_groups, dtype=torch.float32, device=a.device))
    z_n = 0 if zero is None else max(zero.hi - zero.lo, 0)
    z = (scales, 0, 0) if not z_n else (zero.slots, zero.slots.stride(0), zero.lo)
    if launch and rows:
        block_rows = min(QUANT_ROWS, triton.next_power_of_2(rows))
        quantize_groups_kernel[(triton.cdiv(rows, block_rows), n_groups)](
            a, q, scales, rows, a.stride(0), width, scales.stride(0), scales.stride(1), *z, z_n,
            GROUP=group,
            ROWS=block_rows, DOT_F32=INTERPRETING,
            Z_BLOCK=triton.next_power_of_2(triton.cdiv(z_n, n_groups)) if z_n else 0)
    return q, scales


class QuantisedRows(NamedTuple):
    """A GEMM's output rows stored quantised by its epilogue (TileConfig.qout) for the next GEMM:
    e4m3 values and one float32 scale per row and group of `group` columns (the writing tile's
    BLOCK_N), from values rounded to bf16 first where the layer's activations are bf16 (the
    numbers of quantize_groups on the stored rows)."""

    q: torch.Tensor  # [R, W] float8_e4m3fn
    scale: torch.Tensor  # [R, ceil(W / group)] float32
    group: int
    from_bf16: bool

    @property
    def shape(self) -> torch.Size:
        return self.q.shape


def quantised_rows(rows: int, width: int, group: int, like: torch.Tensor) -> QuantisedRows:
    """Empty QuantisedRows [rows, width] on like's device, for activations of like's dtype."""
    return QuantisedRows(torch.empty(rows, width, dtype=torch.float8_e4m3fn, device=like.device),
                         torch.empty(rows, triton.cdiv(width, group), dtype=torch.float32,
                                     device=like.device),
                         group, like.dtype == torch.bfloat16)


def gemm_output(rows: int, width: int, like: torch.Tensor, tile: TileConfig, weights):
    """The buffer a GEMM on `tile` writes for the next GEMM to read: [rows, width] of like's
    dtype, or QuantisedRows in groups of the tile's BLOCK_N columns where its qout asks for it
    on w8a8 FP8 `weights`, or AbsmaxRows in groups of the weights' block_k where its qscale
    does (any other weights with qout or qscale: the plain buffer, which the GEMM then refuses,
    naming the tile)."""
    fmt = weights.fmt if isinstance(weights, Fp8Weight) else None
    w8a8 = fmt is not None and fmt.activations == "fp8"
    if tile.qout and w8a8 and not tile.qscale:
        return quantised_rows(rows, width, tile.block_n, like)
    if tile.qscale and w8a8 and not tile.qout:
        return absmax_rows(rows, width, fmt.block_k, like)
    return torch.empty(rows, width, dtype=like.dtype, device=like.device)


class GemmOperands(NamedTuple):
    """A and C of one grouped-GEMM launch as its kernel takes them (gemm_operands)."""

    a: torch.Tensor  # A's rows as given, or e4m3 where quantised before the GEMM
    a_scale: torch.Tensor | None  # then one scale per row and a_group columns (or absmax)
    a_group: int  # 1 where A has no scales
    a_absmax: bool  # a_scale holds each group's absmax: A is quantised in the main loop with it
    c: torch.Tensor  # C's rows, e4m3 where the tile's qout stores them quantised
    c_scale: torch.Tensor | None  # then one scale per row and BLOCK_N columns (or absmax slots)
    c_from_bf16: bool
    c_absmax: bool  # c_scale: the absmax slots the epilogue gathers into (the tile's qscale)
    c_group: int  # the columns per absmax slot (1 without)


def gemm_operands(a, c, fmt: Fp8Format | None, tile: TileConfig, k: int, a_up_off: int,
                  c_up_off: int, launch: bool = True) -> GemmOperands:
    """A and C for a grouped-GEMM launch on `tile` and weights of format `fmt` (None: bf16),
    reading K columns of A (SwiGLU's up input at a_up_off) and writing C's up half at
    c_up_off: QuantisedRows and AbsmaxRows taken apart, A quantised here for a w8a8 '-pq' tile
    (launch=False: its buffers only; C's absmax slots that its AbsmaxRows.zero names zeroed
    by that launch too); a one-line ValueError naming what the tile cannot do."""
    a_q, c_q = isinstance(a, QuantisedRows), isinstance(c, QuantisedRows)
    a_m, c_m = isinstance(a, AbsmaxRows), isinstance(c, AbsmaxRows)
    w8a8 = fmt is not None and fmt.activations == "fp8"
    if tile.qout and tile.qscale:
        raise ValueError(f"grouped_gemm: tile {tile.name}: '-qo' and '-qs' are two ways to store "
                         "one output: give one")
    if tile.qout != c_q or ((a_q or c_q) and not w8a8):
        raise ValueError(f"grouped_gemm: tile {tile.name}: '-qo' (the output stored quantised) is "
                         "for a GEMM on w8a8 FP8 weights whose output the next GEMM reads whole "
                         "(an up-projection), writing rows that fp8_quant.gemm_output made for it")
    if tile.qscale != c_m or ((a_m or c_m) and not w8a8):
        raise ValueError(f"grouped_gemm: tile {tile.name}: '-qs' (the output stored with its "
                         "absmax per row and group) is for a GEMM on w8a8 FP8 weights whose output "
                         "the next GEMM reads whole (an up-projection), writing rows that "
                         "fp8_quant.gemm_output made for it")
    if c_q and (fmt.block_k % tile.block_n or c_up_off % tile.block_n):
        raise ValueError(f"grouped_gemm: tile {tile.name}: '-qo' needs BLOCK_N and c_up_off "
                         f"({c_up_off}) on the scale groups: a tile's {tile.block_n} columns "
                         f"are one group, which must divide the weights' block_k ({fmt.block_k})")
    if c_m and not group_fits(tile.block_n, c.group, c_up_off):
        raise ValueError(f"grouped_gemm: tile {tile.name}: '-qs' needs BLOCK_N to divide or be a "
                         f"multiple of the {c.group}-column groups and c_up_off ({c_up_off}) a "
                         f"multiple of the smaller: a tile's columns in one group or whole ones")
    preq = w8a8 and (tile.preq or a_q) and not a_m
    a_group = fmt.a_group(tile.preq, a.group if a_q or a_m else None) if fmt else None
    if fmt is not None and not fmt.fits(tile.block_k, a_group):
        on_a = f" and A quantised in groups of {a_group}" if a_group else ""
        raise ValueError(f"grouped_gemm: BLOCK_K {tile.block_k} does not fit {fmt} weights"
                         f"{on_a} (a K step within one scale block and one A group, on w8a8 "
                         f"{FP8_MMA_MIN_K} columns at least; w8a8 quantising A in the main loop: "
                         "BLOCK_K = block_k)")
    if a_group and not preq_groups_fit(a_up_off, k, a.shape[1], a_group):
        raise ValueError(f"grouped_gemm: a pre-quantised A needs a_up_off ({a_up_off}) and K "
                         f"({k}) multiples of its scale group ({a_group}), or K the rest of A's "
                         f"row ({a.shape[1]})")
    zero = c.zero if c_m else None
    if zero is not None and not (preq and not a_q):
        raise ValueError(f"grouped_gemm: tile {tile.name}: '-qs' on the GEMM writing these rows "
                         "needs '-pq' here: the launch quantising its A zeroes their absmax slots")
    if a_q:  # quantised by the GEMM that wrote it (its tile's qout)
        a, a_scale = a.q, a.scale
    elif a_m:  # stored with its absmax by the GEMM that wrote it (its tile's qscale)
        a, a_scale = a.rows, a.absmax
    elif preq:  # the launch before the GEMM; the GEMM reads e4m3 A
        a, a_scale = quantize_groups(a, a_group, launch=launch, zero=zero)
    else:
        a_scale = None
    c_group = c.group if c_m else 1
    c, c_scale, c_bf16 = ((c.q, c.scale, c.from_bf16) if c_q else (c.rows, c.absmax, False)
                          if c_m else (c, None, False))
    return GemmOperands(a, a_scale, a_group or 1, a_m, c, c_scale, c_bf16, c_m, c_group)
