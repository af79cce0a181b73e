"""Per-(row, group) e4m3 quantisation of a GEMM's activations in one launch before the GEMM, as
vLLM's per_token_group_quant_fp8 does for its FP8 block path: the grouped GEMM on a tile with
`preq` (deamoe.kernels.tile_config) then loads e4m3 A and its scales instead of quantising each
A tile in its main loop.  The numbers are the main loop's: scale = max(|group|, 1e-10) / 448,
q = a / scale rounded to e4m3 (deamoe.kernels.fp8.quantize_activations is the reference).
Every row of A is quantised, also rows its GEMM does not read (DeaMoE's expert up-projection
reads the chosen departments' rows of the department output; the others are never written, and
quantise to whatever they hold): one launch over the buffer, with no gather of the rows.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from deamoe.kernels import INTERPRETING
from deamoe.kernels.fp8 import Fp8Weight
from deamoe.kernels.fp8_mma import quantize_rows
from deamoe.kernels.tile_config import TileConfig


@triton.jit
def quantize_groups_kernel(a_ptr, q_ptr, s_ptr, stride_a, width, n_groups,
                           GROUP: tl.constexpr, DOT_F32: tl.constexpr):
    """One program per (row, group of GROUP columns; the last one partial where width is not a
    multiple of GROUP, as the GEMM's masked last K block)."""
    row = tl.program_id(0).to(tl.int64)
    grp = tl.program_id(1)
    cols = (grp * GROUP + tl.arange(0, GROUP))[None, :]  # one row of one group: a [1, GROUP] tile
    ok = cols < width
    q, a_s = quantize_rows(tl.load(a_ptr + row * stride_a + cols, mask=ok, other=0.0), DOT_F32)
    tl.store(q_ptr + row * width + cols, q, mask=ok)
    tl.store(s_ptr + row * n_groups + grp + tl.arange(0, 1), a_s)


def quantize_groups(a: torch.Tensor, group: int, launch: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [R, W] e4m3, scales [R, ceil(W / group)] float32) of a [R, W] (rows of unit column
    stride).  launch=False: the buffers only (a compile-only GEMM launch)."""
    rows, width = a.shape
    if a.stride(-1) != 1:
        raise ValueError(f"quantize_groups: a [{rows}, {width}] needs rows of unit column stride")
    n_groups = triton.cdiv(width, group)
    q = torch.empty(rows, width, dtype=torch.float8_e4m3fn, device=a.device)
    scales = torch.empty(rows, n_groups, dtype=torch.float32, device=a.device)
    if launch and rows:
        quantize_groups_kernel[(rows, n_groups)](a, q, scales, a.stride(0), width, n_groups,
                                                 GROUP=group, DOT_F32=INTERPRETING)
    return q, scales


class QuantisedRows(NamedTuple):
    """A GEMM's output rows stored quantised by its epilogue (TileConfig.qout) for the next GEMM:
    e4m3 values and one float32 scale per row and group, from values rounded to bf16 first
    where the layer's activations are bf16 (the numbers of quantize_groups on the stored rows)."""

    q: torch.Tensor  # [R, W] float8_e4m3fn
    scale: torch.Tensor  # [R, ceil(W / group)] float32
    from_bf16: bool

    @property
    def shape(self) -> torch.Size:
        return self.q.shape


def quantised_rows(rows: int, width: int, group: int, like: torch.Tensor) -> QuantisedRows:
    """Empty QuantisedRows [rows, width] on like's device, for activations of like's dtype."""
    return QuantisedRows(torch.empty(rows, width, dtype=torch.float8_e4m3fn, device=like.device),
                         torch.empty(rows, triton.cdiv(width, group), dtype=torch.float32,
                                     device=like.device),
                         like.dtype == torch.bfloat16)


def gemm_output(rows: int, width: int, like: torch.Tensor, tile: TileConfig, weights):
    """The buffer a GEMM on `tile` writes for the next GEMM to read: [rows, width] of like's
    dtype, or QuantisedRows where the tile's qout asks for it on w8a8 FP8 `weights` (any other
    weights with qout: the plain buffer, which the GEMM then refuses, naming the tile)."""
    fmt = weights.fmt if isinstance(weights, Fp8Weight) else None
    if tile.qout and fmt is not None and fmt.activations == "fp8":
        return quantised_rows(rows, width, fmt.block_k, like)
    return torch.empty(rows, width, dtype=like.dtype, device=like.device)
