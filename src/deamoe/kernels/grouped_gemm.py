"""The one grouped-GEMM primitive under both decode kernels (baseline fused MoE and DeaMoE).

C[c_row(p)] (op)= epilogue( A[a_row(p)] @ B[g]^T )    for every pair p in a block owned by group g

Rows are (token, slot) pairs grouped and padded by `align.py`; a program computes one
BLOCK_M x BLOCK_N tile of one group.  Only the token indexing differs between the GEMMs of the
two layers (the paper's fairness rule), selected by constexpr row modes:
  ROW_TOKEN     p // k                               (x, or the layer output)
  ROW_PAIR      p                                    (per (token, expert) intermediates)
  ROW_TOKDEPT   (p // k) * n_dept + ids[p] // per    (per (token, department) intermediates)
Epilogues (act = silu | gelu | none, applied before the routing weight):
  EPI_ACT       act(A @ Bg^T)
  EPI_SWIGLU    silu(Ag @ Bg^T) * (Au @ Bu^T)         (GATED; Au = A shifted by a_up_off cols)
  EPI_BOTH      act(A @ Bg^T) | act(A @ Bu^T)        (GATED; two halves, up at c_up_off)
WEIGHTED multiplies row p by the routing weight w[p]; ATOMIC accumulates into C (fp32, or bf16
where the layer's tiles ask for it and the device has bf16 atomics: `output_dtype`) instead of
storing, which is how the sum over a token's experts (or departments) happens.  SWAP_AB (a tile
option, `TileConfig.swap`) computes the same tile as (B @ A^T)^T.

Grid: max_blocks * cdiv(N, BLOCK_N) programs, M-block fastest so that the blocks of one group
that share a weight tile run together and the second read comes from L2; or, with N_FASTEST (a
tile option, `TileConfig.nfast`), N-tile fastest, so neighbouring programs stream one group's
whole weight matrix -- 1.4-2.2% faster alone for Qwen3's many small DeaMoE experts.  Programs
past the device-side num_blocks exit at once: the grid never depends on the routing, so no host
sync.
Weights are [G, N, K] row-major (nn.Linear layout, K contiguous), bf16 or block-scaled FP8
(deamoe.kernels.fp8; the scales applied per K block in the main loop: kernels.fp8_mma; w8a8
activations quantised there too, or before the launch with the tile's preq: kernels.fp8_quant,
or with the absmax the GEMM before stored beside its output, '-qs': kernels.fp8_absmax).  A
launch is described by one `GemmSpec` (kernels.gemm_spec: row modes, epilogue, accumulation and
the searched TileConfig); each layer names its GEMMs' specs once and launches them on the tiles
of its MoETiles / DeaMoETiles.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deamoe.kernels import INTERPRETING
from deamoe.kernels.align import Alignment
from deamoe.kernels.fp8 import Fp8Weight, gemm_weights_fp8
from deamoe.kernels.fp8_absmax import AbsmaxRows, absmax_operands, store_absmax
from deamoe.kernels.fp8_mma import fp8_operands, prequantised_operands, scaled_mma, store_quantised
from deamoe.kernels.fp8_quant import QuantisedRows, gemm_operands
from deamoe.kernels.gemm_spec import ACTS, EPI_ACT, GemmSpec
from deamoe.kernels.tile_config import TileConfig


def bf16_atomics(x: torch.Tensor) -> bool:
    """Whether a bf16 layer on x's device can sum in bf16 with atomics: bf16 input on a real
    GPU (Triton's interpreter has no bf16 atomics; fp32 layers keep fp32 sums).  The one rule
    behind the tiles' out_bf16 and DeaMoETiles.s_bf16."""
    return x.is_cuda and x.dtype == torch.bfloat16 and not INTERPRETING


def output_dtype(x: torch.Tensor, out_bf16: bool = True) -> torch.dtype:
    """The dtype a layer with input x sums its output in: bf16 with `out_bf16` where bf16
    atomics exist (so the layer needs no cast launch at its end), else float32 (and the layer
    casts at its end)."""
    bf16 = out_bf16 and bf16_atomics(x) and x.shape[-1] % 2 == 0
    return torch.bfloat16 if bf16 else torch.float32


def layer_output(x: torch.Tensor, lead_words: int = 0,
                 out_bf16: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(zeroed-by-align float32 buffer, out [T, h]) for a layer whose last GEMM atomically sums
    into out: the buffer holds `lead_words` float32 words first (DeaMoE's S), then out in
    `output_dtype(x, out_bf16)` (bf16: the layer's final `.to(x.dtype)` is no copy)."""
    T, h = x.shape
    bf16 = output_dtype(x, out_bf16) == torch.bfloat16
    acc = torch.empty(lead_words + (T * h // 2 if bf16 else T * h), dtype=torch.float32,
                      device=x.device)
    out = acc[lead_words:]
    return acc, (out.view(torch.bfloat16) if bf16 else out).view(T, h)


def run_stages(out: torch.Tensor, stages, x: torch.Tensor) -> torch.Tensor:
    """Run a layer's [(name, launch, weights)] in order; its output in x's dtype (no copy
    where the layer summed in it)."""
    for _, launch, _ in stages:
        launch()
    return out.to(x.dtype)


def on_tokens(x: torch.Tensor, layer_fn) -> torch.Tensor:
    """layer_fn over x [..., h] flattened to [T, h], reshaped back."""
    lead, h = x.shape[:-1], x.shape[-1]
    return layer_fn(x.reshape(-1, h)).reshape(*lead, h)


@triton.jit
def _act(x, ACT: tl.constexpr):
    if ACT == 1:
        x = x * tl.sigmoid(x)
    elif ACT == 2:
        x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    return x


@triton.jit
def _rows(p, ok, ids_ptr, k_top, n_dept, per_group, MODE: tl.constexpr):
    if MODE == 0:
        r = p // k_top
    elif MODE == 1:
        r = p
    else:
        e = tl.load(ids_ptr + p, mask=ok, other=0).to(tl.int32)
        r = (p // k_top) * n_dept + e // per_group
    return r.to(tl.int64)


@triton.jit
def _mma(acc, a, b, DOT_F32: tl.constexpr, SWAP_AB: tl.constexpr):
    """acc + a @ b for a [BLOCK_M, BLOCK_K] and the weight tile b [BLOCK_K, BLOCK_N] of one
    dtype (acc transposed with SWAP_AB)."""
    if DOT_F32:  # interpreter only: its bf16 tl.dot is wrong (triton 3.9), fp32 is exact
        b = b.to(tl.float32)
    a = a.to(b.dtype)
    if SWAP_AB:
        acc = tl.dot(tl.trans(b), tl.trans(a), acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc


# ints that vary with the batch are not specialised on (divisibility by 16): one compile serves
# every batch size, which keeps the tile search's compile time on the device small
@triton.jit(do_not_specialize=["P", "k_top", "n_dept", "per_group", "max_blocks", "g_lo", "g_hi"])
def grouped_gemm_kernel(
    a_ptr, bg_ptr, bu_ptr, c_ptr,
    sorted_ptr, block_group_ptr, nblocks_ptr, ids_ptr, w_ptr, sg_ptr, su_ptr, as_ptr, cs_ptr,
    N, K, P, k_top, n_dept, per_group, max_blocks, g_lo, g_hi,
    stride_am, stride_be, stride_bn, stride_cm, a_up_off, c_up_off, stride_se, stride_sn, stride_as,
    stride_cs,
    A_MODE: tl.constexpr, C_MODE: tl.constexpr, EPI: tl.constexpr, ACT: tl.constexpr,
    WEIGHTED: tl.constexpr, ATOMIC: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    B_DESC: tl.constexpr, SWAP_AB: tl.constexpr, N_FASTEST: tl.constexpr,
    W_FP8: tl.constexpr, A_FP8: tl.constexpr, GROUP_N: tl.constexpr, GROUP_K: tl.constexpr,
    A_PREQ: tl.constexpr, A_GROUP: tl.constexpr, C_FP8: tl.constexpr, C_FROM_BF16: tl.constexpr,
    A_ABSMAX: tl.constexpr, C_ABSMAX: tl.constexpr, C_GROUP: tl.constexpr,
):
    GATED: tl.constexpr = EPI != 0
    pid = tl.program_id(0)
    if N_FASTEST:  # neighbouring programs take one block's N tiles (see TileConfig.nfast)
        n_tiles = tl.cdiv(N, BLOCK_N)
        pid_m = pid // n_tiles
        pid_n = pid % n_tiles
    else:
        pid_m = pid % max_blocks
        pid_n = pid // max_blocks
    if pid_m >= tl.load(nblocks_ptr):
        return
    g = tl.load(block_group_ptr + pid_m).to(tl.int64)
    if (g < g_lo) | (g >= g_hi):  # a launch may serve a range of groups only (split_launches)
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    p = tl.load(sorted_ptr + offs_m)
    row_ok = p < P
    a_rows = _rows(p, row_ok, ids_ptr, k_top, n_dept, per_group, A_MODE)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :]
    if B_DESC:  # B through TMA: bg_ptr/bu_ptr are descriptors of the [G * N, K] weight rows
        b_row = g.to(tl.int32) * N + pid_n * BLOCK_N
    else:
        b_off = g * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
        bg_ptrs = bg_ptr + b_off
        bu_ptrs = bu_ptr + b_off
    if SWAP_AB:  # C^T = B @ A^T: the weight tile is the MMA's M side (see TileConfig.swap)
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if W_FP8:  # the block scales of this N tile's rows (one K block per step: BLOCK_K | GROUP_K)
        s_ptrs = g * stride_se + (offs_n // GROUP_N).to(tl.int64) * stride_sn
    if A_PREQ or A_ABSMAX:  # A quantised before the launch (e4m3): its rows' scales, one per
        # A_GROUP columns; or A as stored with its rows' absmax per A_GROUP columns ('-qs')
        as_ptrs = as_ptr + a_rows * stride_as  # (BLOCK_K | A_GROUP: one per row per step)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a_mask = row_ok[:, None]
            b_mask = n_ok[None, :]
        else:
            a_mask = row_ok[:, None] & (offs_k[None, :] < K - k0)
            b_mask = n_ok[None, :] & (offs_k[:, None] < K - k0)
        # (TMA zero-fills past K and past the last row; rows of the next group that a partial
        # N tile reads only reach output columns >= N, which are not stored)
        if B_DESC:
            bg = tl.trans(bg_ptr.load([b_row, k0]))
        else:
            bg = tl.load(bg_ptrs, mask=b_mask, other=0.0)
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        if A_PREQ:
            a, a_s = prequantised_operands(a, as_ptrs + k0 // A_GROUP, row_ok, DOT_F32)
        elif A_ABSMAX:
            a, a_s = absmax_operands(a, as_ptrs + k0 // A_GROUP, row_ok, DOT_F32)
        elif W_FP8:
            a, a_s = fp8_operands(a, A_FP8, DOT_F32)
        if W_FP8:
            sg = tl.load(sg_ptr + s_ptrs + k0 // GROUP_K, mask=n_ok, other=0.0)
            acc += scaled_mma(a, bg, sg, a_s, A_FP8, DOT_F32, SWAP_AB)
        else:
            acc = _mma(acc, a, bg, DOT_F32, SWAP_AB)
        if GATED:
            if B_DESC:
                bu = tl.trans(bu_ptr.load([b_row, k0]))
            else:
                bu = tl.load(bu_ptrs, mask=b_mask, other=0.0)
            if EPI == 1:
                au = tl.load(a_ptrs + a_up_off, mask=a_mask, other=0.0)
                if A_PREQ:
                    au, au_s = prequantised_operands(au, as_ptrs + (a_up_off + k0) // A_GROUP,
                                                     row_ok, DOT_F32)
                elif A_ABSMAX:
                    au, au_s = absmax_operands(au, as_ptrs + (a_up_off + k0) // A_GROUP,
                                               row_ok, DOT_F32)
                elif W_FP8:
                    au, au_s = fp8_operands(au, A_FP8, DOT_F32)
            else:
                au = a
                if W_FP8:
                    au_s = a_s
            if W_FP8:
                su = tl.load(su_ptr + s_ptrs + k0 // GROUP_K, mask=n_ok, other=0.0)
                acc_u += scaled_mma(au, bu, su, au_s, A_FP8, DOT_F32, SWAP_AB)
            else:
                acc_u = _mma(acc_u, au, bu, DOT_F32, SWAP_AB)
            if not B_DESC:
                bu_ptrs += BLOCK_K
        a_ptrs += BLOCK_K
        if not B_DESC:
            bg_ptrs += BLOCK_K

    if SWAP_AB:  # back to [BLOCK_M, BLOCK_N] for the shared epilogue (a small register shuffle)
        acc = tl.trans(acc)
        acc_u = tl.trans(acc_u)
    if EPI == 1:
        acc = _act(acc, 1) * acc_u
    else:
        acc = _act(acc, ACT)
    if EPI == 2:
        acc_u = _act(acc_u, ACT)
    if WEIGHTED:
        w = tl.load(w_ptr + p, mask=row_ok, other=0.0).to(tl.float32)
        acc = acc * w[:, None]
    c_rows = _rows(p, row_ok, ids_ptr, k_top, n_dept, per_group, C_MODE)
    c_ptrs = c_ptr + c_rows[:, None] * stride_cm + offs_n[None, :]
    c_mask = row_ok[:, None] & n_ok[None, :]
    if C_FP8:  # e4m3 and one scale per row of this tile (its BLOCK_N columns: one group)
        cs_ptrs = cs_ptr + c_rows * stride_cs + pid_n
        store_quantised(acc, c_ptrs, cs_ptrs, c_mask, row_ok, C_FROM_BF16, DOT_F32)
        if EPI == 2:
            store_quantised(acc_u, c_ptrs + c_up_off, cs_ptrs + c_up_off // BLOCK_N, c_mask,
                            row_ok, C_FROM_BF16, DOT_F32)
    elif ATOMIC:
        tl.atomic_add(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask, sem="relaxed")
    else:
        stored = acc.to(c_ptr.dtype.element_ty)
        tl.store(c_ptrs, stored, mask=c_mask)
        if C_ABSMAX:  # and each row's max |stored value| per C_GROUP columns ('-qs')
            slots = cs_ptr + c_rows * stride_cs
            store_absmax(stored, slots, pid_n * BLOCK_N, N - pid_n * BLOCK_N, c_mask, row_ok,
                         BLOCK_M, BLOCK_N, C_GROUP)
        if EPI == 2:
            stored_u = acc_u.to(c_ptr.dtype.element_ty)
            tl.store(c_ptrs + c_up_off, stored_u, mask=c_mask)
            if C_ABSMAX:
                store_absmax(stored_u, slots, c_up_off + pid_n * BLOCK_N, N - pid_n * BLOCK_N,
                             c_mask, row_ok, BLOCK_M, BLOCK_N, C_GROUP)


def _weight_desc(w: torch.Tensor, tile: TileConfig):
    from triton.tools.tensor_descriptor import TensorDescriptor

    G, N, K = w.shape
    if w.stride(0) != N * w.stride(1):
        raise ValueError("grouped_gemm: tma needs the weight groups stacked densely ([G, N, K])")
    return TensorDescriptor(w, [G * N, K], [w.stride(1), 1], [tile.block_n, tile.block_k])


def grouped_gemm(
    a: torch.Tensor | QuantisedRows | AbsmaxRows,
    bg: torch.Tensor | Fp8Weight,
    c: torch.Tensor | QuantisedRows | AbsmaxRows,
    al: Alignment,
    ids: torch.Tensor,
    spec: GemmSpec,
    *,
    bu: torch.Tensor | Fp8Weight | None = None,
    weights: torch.Tensor | None = None,
    groups: tuple[int, int] | None = None,
    warmup: bool = False,
):
    """Launch the primitive as `spec` says. bg/bu: [G, N, K] tensors, or block-scaled FP8
    weights (deamoe.kernels.fp8.Fp8Weight: the scales applied per K block in the main loop,
    activations quantised per group there too where its format says w8a8, or in a launch before
    the GEMM where the tile says preq: deamoe.kernels.fp8_quant); a: rows of width
    >= K (+ a_up_off); c: output (returned); weights: the routing weight of each pair
    (WEIGHTED).  groups=(lo, hi): only the blocks of groups lo..hi-1 are computed (the rest exit
    at once).  a / c may be QuantisedRows (w8a8; `fp8_quant.gemm_output` makes them): A arrives, or C
    leaves, as e4m3 with one scale per row and group of the writing tile's BLOCK_N columns (its
    qout; fp8_quant.gemm_operands says which tiles can read or write them), or AbsmaxRows: A
    arrives, or C leaves, as stored, with each row's absmax per group of the weights' block_k
    (the writing tile's qscale; A then quantised in the main loop with it: fp8_absmax; the
    slots its `zero` names zeroed first by this launch's quantiser of A).
    warmup: compile for these arguments without launching and return Triton's compiled kernel
    (its metadata.shared is the shared memory the kernel needs: `bench smem-check`)."""
    G, N, K = bg.shape
    tile = spec.tile
    fp8 = gemm_weights_fp8(bg, bu)
    qg, qu = (bg.q, bu.q if bu is not None else None) if fp8 else (bg, bu)
    rows = (t.q if isinstance(t, QuantisedRows) else t.rows if isinstance(t, AbsmaxRows) else t
            for t in (a, c))
    if qg.stride(2) != 1 or any(t.stride(-1) != 1 for t in rows):
        raise ValueError("grouped_gemm: the last dimension of a, b and c must be contiguous")
    if (spec.epi != EPI_ACT) != (bu is not None):
        raise ValueError("grouped_gemm: gated epilogues need bu, EPI_ACT must not get one")
    if qu is not None and (qu.shape != qg.shape or qu.stride() != qg.stride()):
        raise ValueError("grouped_gemm: bu must have bg's shape and strides")
    if spec.atomic and (isinstance(c, (QuantisedRows, AbsmaxRows)) or c.dtype not in (torch.float32, torch.bfloat16)):
        raise ValueError("grouped_gemm: atomic accumulation needs a float32 (or bfloat16) output")
    grid = (al.max_blocks * triton.cdiv(N, tile.block_n),)
    b_gate, b_up = qg, qg if qu is None else qu
    if tile.tma:
        b_gate = _weight_desc(qg, tile)
        b_up = b_gate if qu is None else _weight_desc(qu, tile)
    s_gate = bg.scale if fp8 else qg  # (a placeholder pointer where the weights have no scales)
    s_up = bu.scale if fp8 and bu is not None else s_gate
    fmt = bg.fmt if fp8 else None
    ops = gemm_operands(a, c, fmt, tile, K, spec.a_up_off, spec.c_up_off, launch=not warmup)
    a, c_out = ops.a, ops.c
    a_scale = s_gate if ops.a_scale is None else ops.a_scale  # (placeholders where none)
    c_scale = s_gate if ops.c_scale is None else ops.c_scale
    launch = (lambda *args, **kw: grouped_gemm_kernel.warmup(*args, grid=grid, **kw)) if warmup \
        else grouped_gemm_kernel[grid]
    kernel = launch(
        a, b_gate, b_up, c_out,
        al.sorted_pairs, al.block_group, al.num_blocks, ids, c_out if weights is None else weights,
        s_gate, s_up, a_scale, c_scale,
        N, K, al.num_pairs, ids.shape[1], spec.n_dept, spec.per_group, al.max_blocks,
        *(groups if groups is not None else (0, G)),
        a.stride(0), qg.stride(0), qg.stride(1), c_out.stride(0), spec.a_up_off, spec.c_up_off,
        s_gate.stride(0) if fp8 else 0, s_gate.stride(1) if fp8 else 0,
        0 if ops.a_scale is None else a_scale.stride(0), 0 if ops.c_scale is None else c_scale.stride(0),
        A_MODE=spec.a_mode, C_MODE=spec.c_mode, EPI=spec.epi, ACT=ACTS[spec.act],
        WEIGHTED=weights is not None, ATOMIC=spec.atomic, EVEN_K=K % tile.block_k == 0,
        DOT_F32=INTERPRETING,
        BLOCK_M=al.block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k,
        B_DESC=tile.tma, SWAP_AB=tile.swap, N_FASTEST=tile.nfast,
        W_FP8=fp8, A_FP8=fp8 and fmt.activations == "fp8",
        GROUP_N=fmt.block_n if fp8 else 1, GROUP_K=fmt.block_k if fp8 else 1,
        A_PREQ=ops.a_scale is not None and not ops.a_absmax, A_GROUP=ops.a_group,
        C_FP8=ops.c_scale is not None and not ops.c_absmax, C_FROM_BF16=ops.c_from_bf16,
        A_ABSMAX=ops.a_absmax, C_ABSMAX=ops.c_absmax, C_GROUP=ops.c_group,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    return kernel if warmup else c
