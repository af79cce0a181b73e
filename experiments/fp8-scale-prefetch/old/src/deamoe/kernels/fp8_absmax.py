"""'-qs' (TileConfig.qscale): with w8a8 FP8 weights, an up-projection stores its output as it
is (the activations' dtype, as on any other tile) and its epilogue also gathers each row's max
|value| per group of columns -- of the stored (rounded) values -- into a float32 buffer with an
atomic max, one slot per (row, group); the GEMM that reads the output (fp8.QOUT_READERS) loads
its A tile and that slot, takes scale = max(absmax, 1e-10) / 448 and quantises the tile in
registers (fp8_mma.quantize_with_absmax: the same scale and e4m3 values as the quantiser
launch of '-pq' on the stored rows, per_token_group_quant_fp8's formula), then runs the FP8
MMA as '-pq' does.  No quantiser launch between the two GEMMs, no reduction in the reader, K
steps of one group (BLOCK_K dividing it), and any BLOCK_N on the writer: a power of two either
lies inside one group (an n64 tile covers half of one: two programs meet in its slot) or
covers whole ones.

The slots must be zero before the writer runs, every step (CUDA-graph replays too), by a launch
that runs before it anyway:
  (token, expert) rows (the baseline's w13 output, DeaMoE's expert up-projection output):
      align, whose spare programs zero the layer's accumulators (a second buffer of its `zero`);
      it runs before these GEMMs in every stream schedule, split or not.
  (token, department) rows (DeaMoE's department output): the launch quantising x before each
      department up-projection launch ('-pq' on dept_up, which '-qs' there needs), for that
      launch's departments only (AbsmaxRows.zero, `with_zeroed`), since the dense department
      GEMM runs beside align and each split part's department launch beside the others.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from deamoe.kernels.fp8_mma import quantize_with_absmax


class ZeroSlots(NamedTuple):
    """Columns lo..hi-1 of every row of `slots` [T, W] (float32), which a quantiser launch of an
    A of T rows zeroes beside its work (fp8_quant.quantize_groups)."""

    slots: torch.Tensor
    lo: int
    hi: int


class AbsmaxRows(NamedTuple):
    """A GEMM's output rows as stored (TileConfig.qscale) and the max |stored value| of each row
    and group of `group` columns (the weights' block_k; a partial last group where the width is
    not a multiple), for the next GEMM to quantise them with.  zero: the slots the launch that
    writes them zeroes first, in its quantiser of A (`with_zeroed`); None: zeroed by another
    launch before it (align)."""

    rows: torch.Tensor  # [R, W] the activations' dtype
    absmax: torch.Tensor  # [R, ceil(W / group)] float32, zero before the writer runs
    group: int
    zero: ZeroSlots | None = None

    @property
    def shape(self) -> torch.Size:
        return self.rows.shape


def absmax_rows(rows: int, width: int, group: int, like: torch.Tensor) -> AbsmaxRows:
    """Empty AbsmaxRows [rows, width] of like's dtype and device (the slots zeroed later)."""
    return AbsmaxRows(torch.empty(rows, width, dtype=like.dtype, device=like.device),
                      torch.empty(rows, triton.cdiv(width, group), dtype=torch.float32,
                                  device=like.device), group)


def zero_slots(out: AbsmaxRows, tokens: int, per_token: int, lo: int, hi: int) -> ZeroSlots:
    """The absmax slots of the rows t * per_token + j, j in lo..hi-1, of every token t < tokens
    (DeaMoE's (token, department) rows of departments lo..hi-1): per token one run of columns."""
    n = out.absmax.shape[1]
    return ZeroSlots(out.absmax.view(tokens, per_token * n), lo * n, hi * n)


def with_zeroed(out: AbsmaxRows, tokens: int, per_token: int, lo: int, hi: int) -> AbsmaxRows:
    """`out` for a launch writing rows t * per_token + j, j in lo..hi-1, whose quantiser of A
    (of `tokens` rows) zeroes their slots first (zero_slots)."""
    return out._replace(zero=zero_slots(out, tokens, per_token, lo, hi))


def group_fits(block_n: int, group: int, c_up_off: int) -> bool:
    """Whether an output tile of BLOCK_N columns (an up half at c_up_off) gathers its absmax into
    whole slots: its columns inside one group or whole groups, wherever it starts."""
    if block_n % group and group % block_n:
        return False
    return c_up_off % min(block_n, group) == 0


@triton.jit
def store_absmax(stored, slot_ptrs, col0, n_left, mask, row_ok, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, GROUP: tl.constexpr):
    """The max |value| of each row of an output tile as stored (`stored` [BLOCK_M, BLOCK_N], its
    first column col0 of the row, n_left of its columns inside the matrix) atomically maxed into
    its rows' slots (slot_ptrs [BLOCK_M]: slot 0 of each row); the tile inside one group of
    GROUP columns, or over BLOCK_N // GROUP whole ones."""
    m = tl.where(mask, tl.abs(stored.to(tl.float32)), 0.0)
    if BLOCK_N <= GROUP:
        tl.atomic_max(slot_ptrs + col0 // GROUP, tl.max(m, axis=1), mask=row_ok, sem="relaxed")
    else:
        SUB: tl.constexpr = BLOCK_N // GROUP
        sub = tl.arange(0, SUB)
        amax = tl.max(tl.reshape(m, [BLOCK_M, SUB, GROUP]), axis=2)
        ok = row_ok[:, None] & (sub * GROUP < n_left)[None, :]
        tl.atomic_max(slot_ptrs[:, None] + (col0 // GROUP + sub)[None, :], amax, mask=ok,
                      sem="relaxed")


@triton.jit
def absmax_operands(a, slot_ptrs, row_ok, DOT_F32: tl.constexpr):
    """The A tile for an MMA with FP8 weights from rows stored with their absmax: the tile
    quantised in registers with its rows' slots for this K block (one group), and the scales."""
    amax = tl.load(slot_ptrs, mask=row_ok, other=0.0)
    a, a_s = quantize_with_absmax(a.to(tl.float32), amax, DOT_F32)
    if DOT_F32:
        a = a.to(tl.float32)
    return a, a_s
