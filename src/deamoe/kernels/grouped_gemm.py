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
WEIGHTED multiplies row p by the routing weight w[p]; ATOMIC accumulates into C (fp32) instead
of storing, which is how the sum over a token's experts (or departments) happens.  SWAP_AB (a
tile option, `TileConfig.swap`) computes the same tile as (B @ A^T)^T.

Grid: max_blocks * cdiv(N, BLOCK_N) programs, M-block fastest so that the blocks of one group
that share a weight tile run together and the second read comes from L2.  Programs past the
device-side num_blocks exit at once: the grid never depends on the routing, so no host sync.
Weights are [G, N, K] row-major (nn.Linear layout, K contiguous).

Stream-K (a tile option, `TileConfig.stream_k`): a persistent grid of n programs per SM, each
taking an equal contiguous share of the valid tiles' (tile, K step) space, so a GEMM with fewer
tiles than SMs still uses them all (NOTES v29).  A tile that two or more shares meet is summed
by the last of its programs to count itself in, from the fp32 partials the others left in their
slots (in program order); linear atomic epilogues just add each partial into C.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from deamoe.kernels.align import Alignment

ROW_TOKEN, ROW_PAIR, ROW_TOKDEPT = 0, 1, 2
EPI_ACT, EPI_SWIGLU, EPI_BOTH = 0, 1, 2
ACTS = {"none": 0, "silu": 1, "gelu": 2}
_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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
def _tile_acc(a_ptr, bg_ptr, bu_ptr, a_rows, row_ok, g, pid_n, k_lo, k_hi, N, K,
              stride_am, stride_be, stride_bn, a_up_off,
              EPI: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              B_DESC: tl.constexpr, SWAP_AB: tl.constexpr):
    """fp32 sums over K steps k_lo..k_hi of one tile: (acc, acc_u), each [BLOCK_M, BLOCK_N]."""
    GATED: tl.constexpr = EPI != 0
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + (k_lo + offs_k)[None, :]
    if B_DESC:  # B through TMA: bg_ptr/bu_ptr are descriptors of the [G * N, K] weight rows
        b_row = g.to(tl.int32) * N + pid_n * BLOCK_N
    else:
        b_off = g * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + (k_lo + offs_k)[:, None]
        bg_ptrs = bg_ptr + b_off
        bu_ptrs = bu_ptr + b_off
    if SWAP_AB:  # C^T = B @ A^T: the weight tile is the MMA's M side (see TileConfig.swap)
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
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
        if DOT_F32:  # interpreter only: its bf16 tl.dot is wrong (triton 3.9), fp32 is exact
            bg = bg.to(tl.float32)
        a = tl.load(a_ptrs, mask=a_mask, other=0.0).to(bg.dtype)
        if SWAP_AB:
            acc = tl.dot(tl.trans(bg), tl.trans(a), acc)
        else:
            acc = tl.dot(a, bg, acc)
        if GATED:
            if B_DESC:
                bu = tl.trans(bu_ptr.load([b_row, k0]))
            else:
                bu = tl.load(bu_ptrs, mask=b_mask, other=0.0)
            if DOT_F32:
                bu = bu.to(tl.float32)
            if EPI == 1:
                au = tl.load(a_ptrs + a_up_off, mask=a_mask, other=0.0).to(bu.dtype)
            else:
                au = a
            if SWAP_AB:
                acc_u = tl.dot(tl.trans(bu), tl.trans(au), acc_u)
            else:
                acc_u = tl.dot(au, bu, acc_u)
            if not B_DESC:
                bu_ptrs += BLOCK_K
        a_ptrs += BLOCK_K
        if not B_DESC:
            bg_ptrs += BLOCK_K
    if SWAP_AB:  # back to [BLOCK_M, BLOCK_N] for the shared epilogue (a small register shuffle)
        acc = tl.trans(acc)
        acc_u = tl.trans(acc_u)
    return acc, acc_u


@triton.jit
def _tile_out(acc, acc_u, p, row_ok, pid_n, N, c_ptr, w_ptr, ids_ptr, k_top, n_dept, per_group,
              stride_cm, c_up_off, C_MODE: tl.constexpr, EPI: tl.constexpr, ACT: tl.constexpr,
              WEIGHTED: tl.constexpr, ATOMIC: tl.constexpr, BLOCK_N: tl.constexpr):
    """The epilogue of one tile from its full sums: activation, routing weight, store / add."""
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
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
    if ATOMIC:
        tl.atomic_add(c_ptrs, acc, mask=c_mask, sem="relaxed")
    else:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
        if EPI == 2:
            tl.store(c_ptrs + c_up_off, acc_u.to(c_ptr.dtype.element_ty), mask=c_mask)


# ints that vary with the batch are not specialised on (divisibility by 16): one compile serves
# every batch size, which keeps the tile search's compile time on the device small
@triton.jit(do_not_specialize=["P", "k_top", "n_dept", "per_group", "max_blocks", "g_lo", "g_hi"])
def grouped_gemm_kernel(
    a_ptr, bg_ptr, bu_ptr, c_ptr, part_ptr, count_ptr,
    sorted_ptr, block_group_ptr, nblocks_ptr, ids_ptr, w_ptr,
    N, K, P, k_top, n_dept, per_group, max_blocks, g_lo, g_hi,
    stride_am, stride_be, stride_bn, stride_cm, a_up_off, c_up_off,
    A_MODE: tl.constexpr, C_MODE: tl.constexpr, EPI: tl.constexpr, ACT: tl.constexpr,
    WEIGHTED: tl.constexpr, ATOMIC: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    B_DESC: tl.constexpr, SWAP_AB: tl.constexpr, STREAM_K: tl.constexpr,
):
    GATED: tl.constexpr = EPI != 0
    pid = tl.program_id(0)
    if not STREAM_K:  # one program per tile, the whole K range
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
        acc, acc_u = _tile_acc(a_ptr, bg_ptr, bu_ptr, a_rows, row_ok, g, pid_n, 0, K, N, K,
                               stride_am, stride_be, stride_bn, a_up_off, EPI, EVEN_K, DOT_F32,
                               BLOCK_M, BLOCK_N, BLOCK_K, B_DESC, SWAP_AB)
        _tile_out(acc, acc_u, p, row_ok, pid_n, N, c_ptr, w_ptr, ids_ptr, k_top, n_dept,
                  per_group, stride_cm, c_up_off, C_MODE, EPI, ACT, WEIGHTED, ATOMIC, BLOCK_N)
    else:
        # stream-K: the (tile, K step) space of the valid blocks, M-block fastest, cut into
        # num_programs equal contiguous shares; program q owns steps [q*S//n, (q+1)*S//n)
        LINEAR: tl.constexpr = ATOMIC & (EPI == 0) & (ACT == 0)  # partial sums add up in C
        nprog = tl.num_programs(0)
        nb = tl.load(nblocks_ptr)
        ki = tl.cdiv(K, BLOCK_K)
        total = (nb * tl.cdiv(N, BLOCK_N)).to(tl.int64) * ki
        it_lo = pid * total // nprog
        it_hi = (pid + 1) * total // nprog
        t_lo = it_lo // ki
        t_hi = tl.where(it_hi > it_lo, (it_hi + ki - 1) // ki, t_lo)
        tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
        offs_t = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        up_off = (nprog * 2 * tile_elems).to(tl.int64)  # the up halves after the gate halves
        for t in range(t_lo, t_hi):
            s_lo = tl.maximum(it_lo - t * ki, 0)  # this program's K steps of tile t
            s_hi = tl.minimum(it_hi - t * ki, ki)
            pid_m = (t % nb).to(tl.int32)
            pid_n = (t // nb).to(tl.int32)
            g = tl.load(block_group_ptr + pid_m).to(tl.int64)
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            p = tl.load(sorted_ptr + offs_m)
            row_ok = p < P
            a_rows = _rows(p, row_ok, ids_ptr, k_top, n_dept, per_group, A_MODE)
            acc, acc_u = _tile_acc(a_ptr, bg_ptr, bu_ptr, a_rows, row_ok, g, pid_n,
                                   (s_lo * BLOCK_K).to(tl.int32), (s_hi * BLOCK_K).to(tl.int32),
                                   N, K, stride_am, stride_be, stride_bn, a_up_off, EPI, EVEN_K,
                                   DOT_F32, BLOCK_M, BLOCK_N, BLOCK_K, B_DESC, SWAP_AB)
            if LINEAR:  # partial sums of a linear atomic epilogue just add up in C
                _tile_out(acc, acc_u, p, row_ok, pid_n, N, c_ptr, w_ptr, ids_ptr, k_top,
                          n_dept, per_group, stride_cm, c_up_off, C_MODE, EPI, ACT, WEIGHTED,
                          ATOMIC, BLOCK_N)
            else:
                done = (s_lo == 0) & (s_hi == ki)
                if (s_lo != 0) | (s_hi != ki):
                    # park the partial in this program's slot (0: its first tile, 1: its
                    # last), count its K steps in; the one that completes the count adds up
                    slot = (pid * 2 + (t != t_lo).to(tl.int32)).to(tl.int64) * tile_elems
                    tl.store(part_ptr + slot + offs_t, acc)
                    if GATED:
                        tl.store(part_ptr + up_off + slot + offs_t, acc_u)
                    tl.debug_barrier()  # every thread's partial is written before the count
                    steps = (s_hi - s_lo).to(tl.int32)
                    arrived = tl.atomic_add(count_ptr + t, steps, sem="acq_rel")
                    done = arrived + steps == ki
                    if done:
                        tl.store(count_ptr + t, 0)  # zero again for the next launch
                        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                        # the programs whose shares meet tile t, in program order (so the sum
                        # does not depend on who arrives last); the window holds every such q
                        q_lo = tl.maximum(t * ki * nprog // total - 1, 0)
                        q_hi = tl.minimum((t + 1) * ki * nprog // total + 2, nprog)
                        for q in range(q_lo, q_hi):
                            q_it_lo = q * total // nprog
                            q_it_hi = (q + 1) * total // nprog
                            if (q_it_lo < (t + 1) * ki) & (q_it_hi > t * ki) & (q_it_hi > q_it_lo):
                                first = q_it_lo // ki
                                q_slot = (q * 2 + (t != first).to(tl.int64)) * tile_elems
                                acc += tl.load(part_ptr + q_slot + offs_t, cache_modifier=".cg")
                                if GATED:
                                    acc_u += tl.load(part_ptr + up_off + q_slot + offs_t,
                                                     cache_modifier=".cg")
                if done:
                    _tile_out(acc, acc_u, p, row_ok, pid_n, N, c_ptr, w_ptr, ids_ptr, k_top,
                              n_dept, per_group, stride_cm, c_up_off, C_MODE, EPI, ACT,
                              WEIGHTED, ATOMIC, BLOCK_N)


@dataclass(frozen=True)
class TileConfig:
    """Tile of one GEMM: BLOCK_N, BLOCK_K, warps, pipeline stages; tma loads the weight tiles
    with the Hopper tensor-memory accelerator (one bulk copy per tile) instead of per-thread
    16-byte copies (v11: 0-1.5% faster on large GEMMs, up to 9% on the small Baseline-7B ones).
    Split K was measured too (v11, v27: slower everywhere) and is not kept."""

    block_n: int = 64
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 4
    tma: bool = False
    # swap: compute C^T = B @ A^T, so the weight tile's BLOCK_N rows are the MMA's M side and the
    # BLOCK_M token rows its N side (Hopper's wgmma needs M >= 64 per warp group; 16-row token
    # blocks get the older mma.sync in the plain orientation).  Measured: no help for the big
    # department GEMMs (v17), 1.5-4.7% faster for Baseline-7B's small experts (v20)
    swap: bool = False
    # stream_k = n > 0: a persistent grid of n programs per SM sharing the (tile, K step) space
    # equally (NOTES v29): for a GEMM with fewer tiles than SMs (Qwen3's dense department GEMM:
    # 96 tiles on 132 SMs), or tiles that fill the SMs unevenly
    stream_k: int = 0

    @property
    def name(self) -> str:
        text = f"n{self.block_n}-k{self.block_k}-w{self.num_warps}-s{self.num_stages}"
        text += ("-tma" if self.tma else "") + ("-swap" if self.swap else "")
        return text + (f"-sk{self.stream_k}" if self.stream_k else "")

    @classmethod
    def parse(cls, text: str) -> "TileConfig":
        """'n64-k128-w4-s4' -> TileConfig(64, 128, 4, 4); '-tma' appended: TMA weight loads;
        '-swap' appended (after -tma if both): the swapped orientation; '-sk1' (last): stream-K
        with one program per SM."""
        try:
            words = text.split("-")
            stream_k = 0
            if len(words) > 4 and words[-1][:2] == "sk":
                stream_k = int(words.pop()[2:])
                if stream_k < 1:
                    raise ValueError
            flags = words[4:]
            if flags not in ([], ["tma"], ["swap"], ["tma", "swap"]):
                raise KeyError
            parts = {p[0]: int(p[1:]) for p in words[:4]}
            if set(parts) != set("nkws"):
                raise KeyError
            return cls(parts["n"], parts["k"], parts["w"], parts["s"], "tma" in flags,
                       "swap" in flags, stream_k)
        except (KeyError, ValueError, IndexError):
            raise ValueError(f"tile config {text!r} is not of the form n64-k128-w4-s4 "
                             "(optionally with -tma, -swap or -tma-swap, then -sk<programs per "
                             "SM>=1..)") from None


# programs per "SM" under the interpreter (tests set it to vary how the shares meet the tiles)
INTERPRETER_SMS = 3
# per (device, stream): stream-K arrival counts, zero between launches (the last arriver of a
# tile zeroes its count), never freed (a captured CUDA graph keeps their address)
_COUNTS: dict = {}
COUNT_CAPACITY = 1 << 20


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def _arrival_counts(device: torch.device, tiles: int) -> torch.Tensor:
    if tiles > COUNT_CAPACITY:
        raise ValueError(f"grouped_gemm: stream-K for {tiles} tiles exceeds the arrival buffer "
                         f"({COUNT_CAPACITY}); use a tile without -sk")
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    if key not in _COUNTS:
        _COUNTS[key] = torch.zeros(COUNT_CAPACITY, dtype=torch.int32, device=device)
    return _COUNTS[key]


def _weight_desc(w: torch.Tensor, tile: TileConfig):
    from triton.tools.tensor_descriptor import TensorDescriptor

    G, N, K = w.shape
    if w.stride(0) != N * w.stride(1):
        raise ValueError("grouped_gemm: tma needs the weight groups stacked densely ([G, N, K])")
    return TensorDescriptor(w, [G * N, K], [w.stride(1), 1], [tile.block_n, tile.block_k])


def grouped_gemm(
    a: torch.Tensor,
    bg: torch.Tensor,
    c: torch.Tensor,
    al: Alignment,
    ids: torch.Tensor,
    *,
    bu: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    a_mode: int,
    c_mode: int,
    epi: int = EPI_ACT,
    act: str = "none",
    atomic: bool = False,
    n_dept: int = 1,
    per_group: int = 1,
    a_up_off: int = 0,
    c_up_off: int = 0,
    tile: TileConfig = TileConfig(),
    groups: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Launch the primitive. bg/bu: [G, N, K]; a: rows of width >= K (+ a_up_off); c: output.
    groups=(lo, hi): only the blocks of groups lo..hi-1 are computed (the rest exit at once)."""
    G, N, K = bg.shape
    if bg.stride(2) != 1 or a.stride(-1) != 1 or c.stride(-1) != 1:
        raise ValueError("grouped_gemm: the last dimension of a, b and c must be contiguous")
    if (epi != EPI_ACT) != (bu is not None):
        raise ValueError("grouped_gemm: gated epilogues need bu, EPI_ACT must not get one")
    if bu is not None and (bu.shape != bg.shape or bu.stride() != bg.stride()):
        raise ValueError("grouped_gemm: bu must have bg's shape and strides")
    if atomic and c.dtype != torch.float32:
        raise ValueError("grouped_gemm: atomic accumulation needs a float32 output")
    if act not in ACTS:
        raise ValueError(f"grouped_gemm: act={act!r} is not one of {', '.join(ACTS)}")
    tiles = al.max_blocks * triton.cdiv(N, tile.block_n)
    part = count = c  # not read without stream-K
    if tile.stream_k:
        if groups is not None and tuple(groups) != (0, G):
            raise ValueError("grouped_gemm: stream-K tiles serve whole launches, not the group "
                             "ranges of split_launches")
        programs = tile.stream_k * _sm_count(c.device)
        grid = (programs,)
        if not (atomic and epi == EPI_ACT and act == "none"):  # else partials add up in c
            halves = 1 if bu is None else 2
            part = torch.empty(halves * programs * 2 * al.block_m * tile.block_n,
                               dtype=torch.float32, device=c.device)
            count = _arrival_counts(c.device, tiles)
    else:
        grid = (tiles,)
    b_gate, b_up = bg, bg if bu is None else bu
    if tile.tma:
        b_gate = _weight_desc(bg, tile)
        b_up = b_gate if bu is None else _weight_desc(bu, tile)
    grouped_gemm_kernel[grid](
        a, b_gate, b_up, c, part, count,
        al.sorted_pairs, al.block_group, al.num_blocks, ids, c if weights is None else weights,
        N, K, al.num_pairs, ids.shape[1], n_dept, per_group, al.max_blocks,
        *(groups if groups is not None else (0, G)),
        a.stride(0), bg.stride(0), bg.stride(1), c.stride(0), a_up_off, c_up_off,
        A_MODE=a_mode, C_MODE=c_mode, EPI=epi, ACT=ACTS[act],
        WEIGHTED=weights is not None, ATOMIC=atomic, EVEN_K=K % tile.block_k == 0,
        DOT_F32=_INTERPRETING,
        BLOCK_M=al.block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k,
        B_DESC=tile.tma, SWAP_AB=tile.swap, STREAM_K=tile.stream_k > 0,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    return c
