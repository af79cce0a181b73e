"""All GEMMs of a layer in one launch: the stages of `fused_moe` / `deamoe_decode`, chained.

Each GEMM launch pays a fixed cost on top of its bytes: the programs start and fill their load
pipelines (ramp), and the last tiles finish unevenly (tail); on the H200 that is ~5-8 us per
launch (NOTES.md v10), which is why the 4-GEMM DeaMoE layer falls short of its ideal speedup
where its GEMMs are small.  Here one persistent grid (programs = SMs x resident programs per SM)
walks the work items of all stages in a fixed order: stage 0's (block, N tile) items, then stage
1's, ...; program i takes items i, i + grid, i + 2 grid, ...  An item of stage s > 0 first waits
until the rows it reads are written, on device-side counters that stage s - 1 bumps per item:
  DEP_BLOCK  same grouping: all N tiles of the same block        (w2 after w13; expert_down)
  DEP_DEPT   all blocks of the item's department in the previous stage
             (expert_up after dept_up; dept_down after expert_down)
so the tail of one stage overlaps the start of the next.  The tile itself is `gemm_tile`, the
code of every standalone launch (the paper's fairness rule holds: same GEMM code for both
layers); only the A operand is read through L2 (`.cg`), as it may have been written by another
program of this launch.

No deadlock: every program is resident at once (grid <= what fits, from the compiled kernel's
registers and shared memory), and each program takes its items in increasing order, so the
lowest unfinished item only waits on lower, finished ones.  A wait still gives up after
SPIN_MAX polls and raises a flag (sync[0]) rather than hang, which `check_chain` reports.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from deamoe.kernels.align import Alignment
from deamoe.kernels.grouped_gemm import ACTS, EPI_ACT, TileConfig, gemm_tile

DEP_NONE, DEP_BLOCK, DEP_DEPT = 0, 1, 2
SPIN_MAX = 1 << 20
_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _wait(cnt_ptr, target, err_ptr, SPIN_MAX: tl.constexpr, EXACT: tl.constexpr):
    if EXACT:  # interpreter (one program, items in order): the count must be complete already
        if tl.atomic_add(cnt_ptr, 0, sem="acquire") != target:
            tl.atomic_xchg(err_ptr, 1)
    else:
        n = 0
        while (tl.atomic_add(cnt_ptr, 0, sem="acquire") < target) & (n < SPIN_MAX):
            n += 1
        if n >= SPIN_MAX:
            tl.atomic_xchg(err_ptr, 1)


@triton.jit
def _stage(
    local, nt, sorted_ptr, bgroup_ptr, units_prev_ptr, ids_ptr, w_ptr,
    a_ptr, bg_ptr, bu_ptr, c_ptr, N, K, P, k_top, n_dept, per_group,
    sam, sbe, sbn, scm, aup, cup, wait_ptr, wait_nt, sig_ptr, err_ptr,
    A_MODE: tl.constexpr, C_MODE: tl.constexpr, EPI: tl.constexpr, ACT: tl.constexpr,
    WEIGHTED: tl.constexpr, ATOMIC: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, DEP: tl.constexpr, DEP_DIV: tl.constexpr, SIG: tl.constexpr,
    SIG_DIV: tl.constexpr, SPIN_MAX: tl.constexpr, EXACT: tl.constexpr,
):
    pid_m = local // nt
    pid_n = local % nt
    if DEP == 1:
        _wait(wait_ptr + pid_m, wait_nt, err_ptr, SPIN_MAX, EXACT)
    elif DEP == 2:
        dept = tl.load(bgroup_ptr + pid_m) // DEP_DIV
        _wait(wait_ptr + dept, tl.load(units_prev_ptr + dept) * wait_nt, err_ptr, SPIN_MAX, EXACT)
    gemm_tile(pid_m, pid_n, a_ptr, bg_ptr, bu_ptr, c_ptr, sorted_ptr, bgroup_ptr, ids_ptr, w_ptr,
              N, K, P, k_top, n_dept, per_group, sam, sbe, sbn, scm, aup, cup,
              A_MODE, C_MODE, EPI, ACT, WEIGHTED, ATOMIC, EVEN_K, DOT_F32, DEP != 0,
              BLOCK_M, BLOCK_N, BLOCK_K, NUM_STAGES)
    if SIG != 0:
        if SIG == 1:
            idx = pid_m
        else:
            idx = tl.load(bgroup_ptr + pid_m) // SIG_DIV
        tl.debug_barrier()  # every thread's stores/atomics of the tile are done ...
        tl.atomic_add(sig_ptr + idx, 1, sem="release")  # ... before one thread publishes them


# one block of runtime arguments per stage; the constexprs of stage s end in s
@triton.jit(do_not_specialize=["P", "k_top", "n_dept", "per_group", "N0", "N1", "N2", "N3"])
def chain_kernel(
    sorted0, bgroup0, nblocks0, units0, sorted1, bgroup1, nblocks1, units1,
    ids_ptr, w_ptr, sync_ptr, P, k_top, n_dept, per_group,
    a0, bg0, bu0, c0, N0, K0, sam0, sbe0, sbn0, scm0, aup0, cup0, cnt0,
    a1, bg1, bu1, c1, N1, K1, sam1, sbe1, sbn1, scm1, aup1, cup1, cnt1,
    a2, bg2, bu2, c2, N2, K2, sam2, sbe2, sbn2, scm2, aup2, cup2, cnt2,
    a3, bg3, bu3, c3, N3, K3, sam3, sbe3, sbn3, scm3, aup3, cup3, cnt3,
    N_STAGES: tl.constexpr, DOT_F32: tl.constexpr, SPIN_MAX: tl.constexpr, EXACT: tl.constexpr,
    GRP0: tl.constexpr, AM0: tl.constexpr, CM0: tl.constexpr, EPI0: tl.constexpr, ACT0: tl.constexpr,
    WT0: tl.constexpr, AT0: tl.constexpr, EK0: tl.constexpr, BM0: tl.constexpr, BN0: tl.constexpr,
    BK0: tl.constexpr, NS0: tl.constexpr, DEP0: tl.constexpr, DD0: tl.constexpr, SIG0: tl.constexpr,
    SD0: tl.constexpr,
    GRP1: tl.constexpr, AM1: tl.constexpr, CM1: tl.constexpr, EPI1: tl.constexpr, ACT1: tl.constexpr,
    WT1: tl.constexpr, AT1: tl.constexpr, EK1: tl.constexpr, BM1: tl.constexpr, BN1: tl.constexpr,
    BK1: tl.constexpr, NS1: tl.constexpr, DEP1: tl.constexpr, DD1: tl.constexpr, SIG1: tl.constexpr,
    SD1: tl.constexpr,
    GRP2: tl.constexpr, AM2: tl.constexpr, CM2: tl.constexpr, EPI2: tl.constexpr, ACT2: tl.constexpr,
    WT2: tl.constexpr, AT2: tl.constexpr, EK2: tl.constexpr, BM2: tl.constexpr, BN2: tl.constexpr,
    BK2: tl.constexpr, NS2: tl.constexpr, DEP2: tl.constexpr, DD2: tl.constexpr, SIG2: tl.constexpr,
    SD2: tl.constexpr,
    GRP3: tl.constexpr, AM3: tl.constexpr, CM3: tl.constexpr, EPI3: tl.constexpr, ACT3: tl.constexpr,
    WT3: tl.constexpr, AT3: tl.constexpr, EK3: tl.constexpr, BM3: tl.constexpr, BN3: tl.constexpr,
    BK3: tl.constexpr, NS3: tl.constexpr, DEP3: tl.constexpr, DD3: tl.constexpr, SIG3: tl.constexpr,
    SD3: tl.constexpr,
):
    nb0 = tl.load(nblocks0)
    nb1 = tl.load(nblocks1)
    nt0 = tl.cdiv(N0, BN0)
    nt1 = tl.cdiv(N1, BN1)
    nt2 = tl.cdiv(N2, BN2)
    e0 = (nb0 if GRP0 == 0 else nb1) * nt0
    e1 = e0 + (nb0 if GRP1 == 0 else nb1) * nt1
    if N_STAGES == 2:
        total = e1
        e2 = e1
    else:
        e2 = e1 + (nb0 if GRP2 == 0 else nb1) * nt2
        total = e2 + (nb0 if GRP3 == 0 else nb1) * tl.cdiv(N3, BN3)
    for it in tl.range(tl.program_id(0), total, tl.num_programs(0), num_stages=1):
        if it < e0:
            _stage(it, nt0, sorted0 if GRP0 == 0 else sorted1, bgroup0 if GRP0 == 0 else bgroup1,
                   units0, ids_ptr, w_ptr, a0, bg0, bu0, c0, N0, K0, P, k_top, n_dept, per_group,
                   sam0, sbe0, sbn0, scm0, aup0, cup0, cnt0, 0, cnt0, sync_ptr,
                   AM0, CM0, EPI0, ACT0, WT0, AT0, EK0, DOT_F32, BM0, BN0, BK0, NS0,
                   DEP0, DD0, SIG0, SD0, SPIN_MAX, EXACT)
        elif it < e1:
            _stage(it - e0, nt1, sorted0 if GRP1 == 0 else sorted1,
                   bgroup0 if GRP1 == 0 else bgroup1, units0 if GRP0 == 0 else units1,
                   ids_ptr, w_ptr, a1, bg1, bu1, c1, N1, K1, P, k_top, n_dept, per_group,
                   sam1, sbe1, sbn1, scm1, aup1, cup1, cnt0, nt0, cnt1, sync_ptr,
                   AM1, CM1, EPI1, ACT1, WT1, AT1, EK1, DOT_F32, BM1, BN1, BK1, NS1,
                   DEP1, DD1, SIG1, SD1, SPIN_MAX, EXACT)
        else:
            if N_STAGES > 2:
                if it < e2:
                    _stage(it - e1, nt2, sorted0 if GRP2 == 0 else sorted1,
                           bgroup0 if GRP2 == 0 else bgroup1, units0 if GRP1 == 0 else units1,
                           ids_ptr, w_ptr, a2, bg2, bu2, c2, N2, K2, P, k_top, n_dept, per_group,
                           sam2, sbe2, sbn2, scm2, aup2, cup2, cnt1, nt1, cnt2, sync_ptr,
                           AM2, CM2, EPI2, ACT2, WT2, AT2, EK2, DOT_F32, BM2, BN2, BK2, NS2,
                           DEP2, DD2, SIG2, SD2, SPIN_MAX, EXACT)
                else:
                    _stage(it - e2, tl.cdiv(N3, BN3), sorted0 if GRP3 == 0 else sorted1,
                           bgroup0 if GRP3 == 0 else bgroup1, units0 if GRP2 == 0 else units1,
                           ids_ptr, w_ptr, a3, bg3, bu3, c3, N3, K3, P, k_top, n_dept, per_group,
                           sam3, sbe3, sbn3, scm3, aup3, cup3, cnt2, nt2, cnt3, sync_ptr,
                           AM3, CM3, EPI3, ACT3, WT3, AT3, EK3, DOT_F32, BM3, BN3, BK3, NS3,
                           DEP3, DD3, SIG3, SD3, SPIN_MAX, EXACT)


@dataclass
class ChainStage:
    """One GEMM of the chain: grouped_gemm's arguments plus how it waits and signals.

    grouping: index into the chain's alignments; dep / sig: DEP_* (sig = the next stage's dep);
    dep_div / sig_div: groups per department of this stage's grouping (1 if it groups by
    department, experts-per-department if by expert)."""

    a: torch.Tensor
    bg: torch.Tensor
    c: torch.Tensor
    grouping: int
    a_mode: int
    c_mode: int
    tile: TileConfig
    bu: torch.Tensor | None = None
    weighted: bool = False
    epi: int = EPI_ACT
    act: str = "none"
    atomic: bool = False
    a_up_off: int = 0
    c_up_off: int = 0
    dep: int = DEP_NONE
    dep_div: int = 1
    sig: int = DEP_NONE
    sig_div: int = 1


def sync_size(stages: list[ChainStage], groupings: list[Alignment], n_dept: int) -> int:
    """int32 words of counters the chain needs (flag + one array per signalling stage)."""
    n = 1
    for s in stages:
        if s.sig == DEP_BLOCK:
            n += groupings[s.grouping].max_blocks
        elif s.sig == DEP_DEPT:
            n += n_dept
    return n


_OCCUPANCY: dict = {}


def _resident_per_sm(compiled, num_warps: int, device) -> int:
    """Programs of this compiled kernel that fit on one SM at once (registers, shared memory)."""
    props = torch.cuda.get_device_properties(device)
    smem = getattr(props, "shared_memory_per_multiprocessor", 233472)
    regs = getattr(props, "regs_per_multiprocessor", 65536)
    threads = getattr(props, "max_threads_per_multi_processor", 2048)
    shared = int(getattr(compiled.metadata, "shared", 0) or 0)
    n_regs = int(getattr(compiled, "n_regs", 0) or 0)
    fits = [threads // (32 * num_warps), 32]
    if shared:
        fits.append(smem // (shared + 1024))  # 1 KB per program is reserved by the driver
    if n_regs:
        fits.append(regs // (math.ceil(n_regs / 8) * 8 * 32 * num_warps))
    return max(1, min(fits))


def chain_gemm(stages: list[ChainStage], groupings: list[Alignment], ids: torch.Tensor,
               weights: torch.Tensor | None, sync: torch.Tensor, n_dept: int = 1,
               per_group: int = 1) -> None:
    """Launch the chained stages (2 or 4).  `sync`: int32 counters, zeroed before every call
    (align's zeroing programs do it), of at least sync_size(...) words."""
    if len(stages) not in (2, 4):
        raise ValueError(f"chain_gemm: 2 or 4 stages, got {len(stages)}")
    if sync.dtype != torch.int32 or sync.numel() < sync_size(stages, groupings, n_dept):
        raise ValueError("chain_gemm: sync must be int32 with sync_size(...) words")
    for prev, s in zip(stages, stages[1:]):
        if prev.sig != s.dep:
            raise ValueError("chain_gemm: each stage's sig must be the next stage's dep")
        if s.dep == DEP_DEPT and groupings[prev.grouping].units is None:
            raise ValueError("chain_gemm: a department wait needs its producer grouping's units "
                             "(AlignSpec.unit_div)")
    g0, g1 = groupings[0], groupings[-1]
    units = [g.units if g.units is not None else g.num_blocks for g in (g0, g1)]
    args = [g0.sorted_pairs, g0.block_group, g0.num_blocks, units[0],
            g1.sorted_pairs, g1.block_group, g1.num_blocks, units[1],
            ids, ids if weights is None else weights, sync, g0.num_pairs, ids.shape[1], n_dept,
            per_group]
    consts = {"N_STAGES": len(stages), "DOT_F32": _INTERPRETING, "SPIN_MAX": SPIN_MAX,
              "EXACT": _INTERPRETING}
    offset, warps, max_items = 1, 1, 0
    padded = stages + [stages[-1]] * (4 - len(stages))
    for i, s in enumerate(padded):
        G, N, K = s.bg.shape
        al = groupings[s.grouping]
        cnt = sync[offset:] if i < len(stages) else sync
        if i < len(stages):
            offset += al.max_blocks if s.sig == DEP_BLOCK else (n_dept if s.sig == DEP_DEPT else 0)
            warps = max(warps, s.tile.num_warps)
            max_items += al.max_blocks * triton.cdiv(N, s.tile.block_n)
        args += [s.a, s.bg, s.bg if s.bu is None else s.bu, s.c, N, K, s.a.stride(0),
                 s.bg.stride(0), s.bg.stride(1), s.c.stride(0), s.a_up_off, s.c_up_off, cnt]
        consts.update({f"GRP{i}": s.grouping, f"AM{i}": s.a_mode, f"CM{i}": s.c_mode,
                       f"EPI{i}": s.epi, f"ACT{i}": ACTS[s.act], f"WT{i}": s.weighted,
                       f"AT{i}": s.atomic, f"EK{i}": K % s.tile.block_k == 0,
                       f"BM{i}": al.block_m, f"BN{i}": s.tile.block_n, f"BK{i}": s.tile.block_k,
                       f"NS{i}": s.tile.num_stages, f"DEP{i}": s.dep, f"DD{i}": s.dep_div,
                       f"SIG{i}": s.sig, f"SD{i}": s.sig_div})
    stages_max = max(s.tile.num_stages for s in stages)
    if _INTERPRETING or not ids.is_cuda:
        grid = 1  # programs run one after another: one program takes the items in order
    else:
        key = (ids.device.index, warps, stages_max, tuple(sorted(consts.items())))
        if key not in _OCCUPANCY:
            compiled = chain_kernel.warmup(*args, grid=(1,), num_warps=warps,
                                           num_stages=stages_max, **consts)
            if hasattr(compiled, "_init_handles"):  # loads the binary: n_regs is known after
                compiled._init_handles()
            _OCCUPANCY[key] = _resident_per_sm(compiled, warps, ids.device)
        sms = torch.cuda.get_device_properties(ids.device).multi_processor_count
        grid = max(1, min(max_items, sms * _OCCUPANCY[key]))
    chain_kernel[(grid,)](*args, num_warps=warps, num_stages=stages_max, **consts)
    if _INTERPRETING:  # every wait must have found its count complete and exact
        check_chain(sync)


def check_chain(sync: torch.Tensor) -> None:
    """Raise if a chained launch gave up waiting (a dependency never arrived)."""
    if int(sync[0].item()) != 0:
        raise RuntimeError("chain_gemm: a stage's wait failed (past SPIN_MAX polls on the GPU, or "
                           "an incomplete count under the interpreter): results are invalid")
