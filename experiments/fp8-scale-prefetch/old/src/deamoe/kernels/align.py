"""Group (token, slot) pairs by expert or department and pad each group to BLOCK_M rows.

This is the token-indexing half of the grouped-GEMM primitive (`grouped_gemm.py`): it turns the
router's top-k ids [T, k] into
  sorted_pairs [max_slots] int32  pair index p = t * k + slot, grouped by group id, each group
                                  padded to a multiple of BLOCK_M with the sentinel P (the
                                  slots past num_blocks * BLOCK_M hold P too: the whole buffer
                                  is filled with it before the scatter)
  block_group  [max_blocks] int32 the group (expert or department) that owns each BLOCK_M block
  num_blocks   [1] int32          how many blocks are in use (the GEMM grid is sized by the
                                  host-side bound `max_blocks`; programs past num_blocks exit)
Everything stays on the device (no host sync), so the whole layer can be captured in a CUDA graph.

Group of pair p: ids[p] // per_group (per_group = 1 for experts, experts-per-department for
departments).  With DEDUP, only the first slot of each (token, group) is kept: the department
stage processes each (token, department) once however many of its experts the token picked.

One launch does up to two alignments (program 0: task A, program 1: task B): DeaMoE needs the
department and the expert grouping of the same routing, the baseline only the expert grouping.
Within a task a single program does the work: P <= a few thousand pairs, so a block-wide counting
sort (sentinel fill, atomic histogram -> exclusive scan -> scatter) costs a few microseconds.  When
all pairs fit one pass (<= 2048: any decode step up to ~200 tokens) ranks, groups and group
starts stay in registers between the phases; beyond that (or with `memory_phases`, for the tests)
they go through memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@triton.jit
def _group_and_keep(ids_ptr, p, ok, k_top, PER: tl.constexpr, DEDUP: tl.constexpr,
                    K_MAX: tl.constexpr):
    """(group of each pair, keep flag).  PER (experts per group) is a constexpr, so the one
    division per pair is a multiply-shift.  DEDUP keeps the first slot of each (token, group):
    an earlier slot j of the same token is in the same group iff its id is in
    [g * PER, (g + 1) * PER) -- two compares, no division (a division per earlier slot cost
    2-4 us at 128 tokens).  Unrolled, so the k loads are in flight together."""
    # int32 before dividing: an int64 division is a ~70-instruction software routine, which
    # was most of DeaMoE's 17-37 us align at 640-1280 pairs
    g = tl.load(ids_ptr + p, mask=ok, other=0).to(tl.int32) // PER
    if DEDUP:
        slot = p % k_top
        first = p - slot
        lo = g * PER
        for j in tl.static_range(K_MAX):
            ej = tl.load(ids_ptr + first + j, mask=ok & (j < slot), other=-1).to(tl.int32)
            ok = ok & ~((j < slot) & (ej >= lo) & (ej < lo + PER))
    return g, ok


@triton.jit
def _scan(counts_ptr, G, nblocks_ptr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr):
    """Exclusive scan of the padded group sizes -> each group's first slot (and the block
    count).  The padding slots need no store here: `_fill_sentinel` wrote the sentinel
    everywhere before the scatter (the masked [BLOCK_G, BLOCK_M] store of each group's padding
    it replaced was ~1700 of 5536 instructions per thread at 1024 groups; DeaMoE's align at
    128 tokens 6.6 -> 5.2 us)."""
    offs_g = tl.arange(0, BLOCK_G)
    c = tl.load(counts_ptr + offs_g, mask=offs_g < G, other=0, volatile=True)
    padded = (c + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = tl.cumsum(padded, 0) - padded
    tl.store(nblocks_ptr, tl.sum(padded, 0) // BLOCK_M)
    return start


@triton.jit
def _fill_sentinel(sorted_ptr, P, max_slots, FILL: tl.constexpr):
    """Every slot of the buffer <- the sentinel P, in contiguous (vector) stores; the pairs
    scattered after the next barrier overwrite theirs, so what stays P is the padding."""
    for s0 in range(0, max_slots, FILL):
        o = s0 + tl.arange(0, FILL)
        tl.store(sorted_ptr + o, tl.full([FILL], 0, tl.int32) + P, mask=o < max_slots)


@triton.jit
def _align_one(
    ids_ptr, P, k_top, G,
    counts_ptr, rank_ptr, offs_ptr, sorted_ptr, block_group_ptr, nblocks_ptr, max_slots,
    PER: tl.constexpr, DEDUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr,
    BLOCK_G: tl.constexpr, K_MAX: tl.constexpr, ONE_PASS: tl.constexpr,
):
    offs_g = tl.arange(0, BLOCK_G)
    tl.store(counts_ptr + offs_g, tl.zeros([BLOCK_G], dtype=tl.int32), mask=offs_g < G)
    _fill_sentinel(sorted_ptr, P, max_slots, BLOCK_P)  # ordered before the scatter by the barrier
    tl.debug_barrier()
    # 1. rank of each pair inside its group and the group sizes: an atomic histogram whose
    #    returned old value is the rank.  Prefix sums (a one-hot or a per-group scan) rank
    #    without atomics but were slower than these relaxed atomics, 8 hot counters included,
    #    once the int64 division was gone.
    # 2. the scan (_scan); the padding is what the fill left
    # 3. scatter each kept pair to its slot; every used block gets its group id
    if ONE_PASS:  # BLOCK_P covers every pair (up to 2048: any decode step up to ~200 tokens)
        p = tl.arange(0, BLOCK_P)
        g, ok = _group_and_keep(ids_ptr, p, p < P, k_top, PER, DEDUP, K_MAX)
        r = tl.atomic_add(counts_ptr + g, tl.full([BLOCK_P], 1, tl.int32), mask=ok, sem="relaxed")
        tl.debug_barrier()
        start = _scan(counts_ptr, G, nblocks_ptr, BLOCK_M, BLOCK_G)
        # group, rank and keep flag are still in registers and the group starts are gathered
        # from registers: no reload of ranks, ids and offsets through memory (three dependent
        # round trips; with the constexpr PER and the compare-based dedup, DeaMoE-7B's align at
        # 128 tokens went 8.1 -> 6.6 us)
        pos = tl.gather(start, tl.where(ok, g, 0), 0) + r
        tl.store(sorted_ptr + pos, p.to(tl.int32), mask=ok)
        tl.store(block_group_ptr + pos // BLOCK_M, g, mask=ok)
    else:
        for p0 in range(0, P, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            g, ok = _group_and_keep(ids_ptr, p, p < P, k_top, PER, DEDUP, K_MAX)
            r = tl.atomic_add(counts_ptr + g, tl.full([BLOCK_P], 1, tl.int32), mask=ok,
                              sem="relaxed")
            tl.store(rank_ptr + p, tl.where(ok, r, -1), mask=p < P)
        tl.debug_barrier()
        start = _scan(counts_ptr, G, nblocks_ptr, BLOCK_M, BLOCK_G)
        tl.store(offs_ptr + offs_g, start, mask=offs_g < G)
        tl.debug_barrier()
        for p0 in range(0, P, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            r = tl.load(rank_ptr + p, mask=p < P, other=-1, volatile=True)
            ok = r >= 0
            g = tl.load(ids_ptr + p, mask=ok, other=0).to(tl.int32) // PER
            pos = tl.load(offs_ptr + g, mask=ok, other=0, volatile=True) + r
            tl.store(sorted_ptr + pos, p.to(tl.int32), mask=ok)
            tl.store(block_group_ptr + pos // BLOCK_M, g, mask=ok)


@triton.jit
def _align_kernel(
    ids_ptr, P, k_top,
    a_G, a_counts, a_rank, a_offs, a_sorted, a_bgroup, a_nblocks, a_max_slots,
    b_G, b_counts, b_rank, b_offs, b_sorted, b_bgroup, b_nblocks, b_max_slots,
    zero_ptr, zero_n, zero2_ptr, zero2_n, zero_programs,
    A_PER: tl.constexpr, A_DEDUP: tl.constexpr, A_BLOCK_M: tl.constexpr,
    A_BLOCK_G: tl.constexpr, A_BLOCK_P: tl.constexpr,
    B_PER: tl.constexpr, B_DEDUP: tl.constexpr, B_BLOCK_M: tl.constexpr,
    B_BLOCK_G: tl.constexpr, B_BLOCK_P: tl.constexpr,
    N_TASKS: tl.constexpr, ZERO_BLOCK: tl.constexpr, K_MAX: tl.constexpr, ONE_PASS: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid == 0:
        _align_one(ids_ptr, P, k_top, a_G, a_counts, a_rank, a_offs, a_sorted, a_bgroup,
                   a_nblocks, a_max_slots, A_PER, A_DEDUP, A_BLOCK_M, A_BLOCK_P, A_BLOCK_G,
                   K_MAX, ONE_PASS)
    elif pid < N_TASKS:
        _align_one(ids_ptr, P, k_top, b_G, b_counts, b_rank, b_offs, b_sorted, b_bgroup,
                   b_nblocks, b_max_slots, B_PER, B_DEDUP, B_BLOCK_M, B_BLOCK_P, B_BLOCK_G,
                   K_MAX, ONE_PASS)
    else:
        # the remaining programs zero the layer's fp32 accumulators (and a second buffer: absmax
        # slots of '-qs' outputs, deamoe.kernels.fp8_absmax): no separate memset launch
        z = pid - N_TASKS
        if z < zero_programs:
            _zero_words(zero_ptr, zero_n, z, ZERO_BLOCK)
        else:
            _zero_words(zero2_ptr, zero2_n, z - zero_programs, ZERO_BLOCK)


@triton.jit
def _zero_words(ptr, n, z, ZERO_BLOCK: tl.constexpr):
    offs = z.to(tl.int64) * ZERO_BLOCK * 4 + tl.arange(0, ZERO_BLOCK)
    for u in tl.static_range(4):
        o = offs + u * ZERO_BLOCK
        tl.store(ptr + o, tl.zeros([ZERO_BLOCK], dtype=tl.float32), mask=o < n)


@dataclass
class Alignment:
    """Pairs grouped and padded for one grouped GEMM (all tensors on the routing's device)."""

    sorted_pairs: torch.Tensor
    block_group: torch.Tensor
    num_blocks: torch.Tensor
    max_blocks: int  # host-side bound used to size the GEMM grid
    block_m: int
    num_pairs: int  # P = T * k; the padding sentinel
    n_groups: int
    per_group: int
    dedup: bool


@dataclass(frozen=True)
class AlignSpec:
    n_groups: int
    per_group: int = 1
    dedup: bool = False
    block_m: int = 16


def _bounds(P: int, spec: AlignSpec) -> tuple[int, int]:
    # every used block holds >= 1 pair, and sum ceil(c/BM) <= P/BM + (groups in use)
    max_blocks = min(P, P // spec.block_m + min(spec.n_groups, P))
    return max_blocks * spec.block_m, max_blocks


def _buffers(P: int, spec: AlignSpec, device) -> tuple[Alignment, list[torch.Tensor]]:
    max_slots, max_blocks = _bounds(P, spec)
    i32 = dict(dtype=torch.int32, device=device)
    al = Alignment(
        sorted_pairs=torch.empty(max_slots, **i32),
        block_group=torch.empty(max_blocks, **i32),
        num_blocks=torch.empty(1, **i32),
        max_blocks=max_blocks,
        block_m=spec.block_m,
        num_pairs=P,
        n_groups=spec.n_groups,
        per_group=spec.per_group,
        dedup=spec.dedup,
    )
    scratch = [torch.empty(spec.n_groups, **i32), torch.empty(P, **i32),
               torch.empty(spec.n_groups, **i32)]
    return al, scratch


ZERO_BLOCK = 4096


def align(ids: torch.Tensor, *specs: AlignSpec,
          zero: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
          memory_phases: bool = False) -> tuple[Alignment, ...]:
    """Align the routing `ids` [T, k] for one or two groupings in a single launch.

    zero: an optional contiguous float32 buffer (or a tuple of up to two) the same launch fills
    with zeros (the atomic accumulators of the GEMMs that follow, the absmax slots of '-qs'
    outputs), saving a memset node per layer and buffer.
    memory_phases: ranks, ids and group offsets go through memory between the phases even when
    all pairs fit one pass -- the path for > 2048 pairs, so the tests can reach it at small sizes.
    """
    if ids.dim() != 2:
        raise ValueError(f"align: ids must be [T, k], got shape {tuple(ids.shape)}")
    if not 1 <= len(specs) <= 2:
        raise ValueError("align: pass one or two AlignSpec")
    ids = ids.contiguous()
    T, k = ids.shape
    P = T * k
    made = [_buffers(P, s, ids.device) for s in specs]
    args, consts = [], {}
    block_p = max(256, min(2048, triton.next_power_of_2(P)))
    for tag, spec, (al, (counts, rank, offs)) in zip("AB", specs * (3 - len(specs)),
                                                    made * (3 - len(made))):
        args += [spec.n_groups, counts, rank, offs, al.sorted_pairs,
                 al.block_group, al.num_blocks, al.sorted_pairs.numel()]
        consts.update({f"{tag}_PER": spec.per_group, f"{tag}_DEDUP": spec.dedup,
                       f"{tag}_BLOCK_M": spec.block_m,
                       f"{tag}_BLOCK_G": triton.next_power_of_2(spec.n_groups),
                       f"{tag}_BLOCK_P": block_p})
    zeros = () if zero is None else (zero,) if isinstance(zero, torch.Tensor) else tuple(zero)
    if len(zeros) > 2 or any(z.dtype != torch.float32 or not z.is_contiguous() for z in zeros):
        raise ValueError("align: zero must be a contiguous float32 tensor (or a tuple of two)")
    programs = [triton.cdiv(z.numel(), 4 * ZERO_BLOCK) for z in zeros] + [0, 0]
    buffers = [a for z in zeros for a in (z, z.numel())] + [ids, 0] * (2 - len(zeros))
    _align_kernel[(len(specs) + programs[0] + programs[1],)](
        ids, P, k, *args, *buffers, programs[0],
        N_TASKS=len(specs), ZERO_BLOCK=ZERO_BLOCK, K_MAX=k,
        ONE_PASS=P <= block_p and not memory_phases, num_warps=8, **consts)
    return tuple(al for al, _ in made)


_DENSE: dict = {}


def dense_alignment(n_tokens: int, n_groups: int, per_group: int, block_m: int,
                    device) -> tuple[Alignment, torch.Tensor]:
    """(alignment, ids) for "every token in every group", independent of the routing.

    Pairs p = t * n_groups + g with ids[t, g] = g * per_group, so the GEMM row modes read
    ROW_TOKEN -> t and ROW_TOKDEPT -> t * n_groups + g (the (token, department) rows of a
    routed department GEMM).  Used by DeaMoE's dense department up-projection, which needs no
    routing and so can run while the router does (deamoe_decode.py).  Cached per
    shape, except while a CUDA graph is being captured: tensors made then hold their values only
    once the graph replays.
    """
    key = (n_tokens, n_groups, per_group, block_m, str(device))
    if key in _DENSE:
        return _DENSE[key]
    blocks_per_group = triton.cdiv(n_tokens, block_m)
    i32 = dict(dtype=torch.int32, device=device)
    slot = torch.arange(blocks_per_group * block_m, **i32)  # token index inside a group's blocks
    group = torch.arange(n_groups, **i32)
    P = n_tokens * n_groups
    pairs = torch.where(slot[None, :] < n_tokens, slot[None, :] * n_groups + group[:, None], P)
    n_blocks = n_groups * blocks_per_group
    al = Alignment(
        sorted_pairs=pairs.reshape(-1).contiguous(),
        block_group=group.repeat_interleave(blocks_per_group),
        num_blocks=torch.full((1,), n_blocks, **i32),
        max_blocks=n_blocks,
        block_m=block_m,
        num_pairs=P,
        n_groups=n_groups,
        per_group=per_group,
        dedup=True,
    )
    ids = (group * per_group).expand(n_tokens, n_groups).contiguous()
    made = (al, ids)
    capturing = torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()
    if not capturing:
        _DENSE[key] = made
    return made
