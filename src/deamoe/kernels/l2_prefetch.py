"""Prefetch the weights of a layer's next GEMM into L2 while another GEMM still streams.

Why (NOTES.md v46): at small batches DeaMoE's dense department up-GEMM (`dense_dept_up`) runs
beside the routing on fewer programs than the GPU has SMs (Qwen3 at 4 tokens: 96 programs, ~4.05
TB/s against a 4.57 TB/s read roofline).  Once the routing and align are done, ~15 us into that
~50 us GEMM, the expert grouping is known, and the spare HBM bandwidth can pull the first routed
experts' gate/up weights into L2 -- bytes expert_up then reads from L2 instead of HBM.

The first block of each group among the first `n_blocks` blocks of the expert alignment issues
Hopper bulk prefetches (`cp.async.bulk.prefetch.L2`, CHUNK bytes each) over that group's whole
weight matrices, one program per PIECE bytes.  They are fire-and-forget: the kernel exits once
they are issued and the copies proceed.  A hint only -- nothing the layer computes depends on it.  Needs sm_90 and real PTX, so it is skipped under Triton's
interpreter (`available()`).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from deamoe.kernels.align import Alignment

CHUNK = 32 * 1024  # bytes per bulk prefetch (a multiple of 16; addresses stay 16-byte aligned)
# bytes per program: v46 issued a whole expert matrix from one program, and one SM's bulk copy
# unit then took longer than the GEMM it was meant to hide behind; spread over many programs,
# the SMs the dense GEMM leaves free share the issuing
PIECE = 256 * 1024


# the PTX of one lane: $1 address, $2 on/off, $3 bytes; the policy keeps the lines through the
# streaming GEMM that runs meanwhile (its own loads are evict-normal)
_PTX_EVICT_LAST = tl.constexpr(
    "{ .reg .pred p; .reg .b64 pol; setp.ne.u32 p, $2, 0; "
    "createpolicy.fractional.L2::evict_last.b64 pol, 1.0; "
    "@p cp.async.bulk.prefetch.L2.global.L2::cache_hint [$1], $3, pol; mov.u32 $0, 0; }")
_PTX_NORMAL = tl.constexpr(
    "{ .reg .pred p; setp.ne.u32 p, $2, 0; "
    "@p cp.async.bulk.prefetch.L2.global [$1], $3; mov.u32 $0, 0; }")


@triton.jit
def _bulk_prefetch_l2(addr, on, nbytes, EVICT_LAST: tl.constexpr):
    # `on` predicates each lane's instruction, so the tail of the chunk vector issues nothing
    args = [addr, on.to(tl.int32), nbytes]
    if EVICT_LAST:
        tl.inline_asm_elementwise(_PTX_EVICT_LAST, "=r,l,r,r", args, dtype=tl.int32,
                                  is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise(_PTX_NORMAL, "=r,l,r,r", args, dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit(do_not_specialize=["n_blocks"])
def _prefetch_groups_kernel(w0_ptr, w1_ptr, block_group_ptr, nblocks_ptr, n_blocks, group_bytes,
                            pieces, CHUNK_BYTES: tl.constexpr, N_CHUNKS: tl.constexpr,
                            EVICT_LAST: tl.constexpr):
    # program (b, w * pieces + i): piece i (N_CHUNKS chunks) of weight tensor w of block b's group
    b = tl.program_id(0)
    if b >= n_blocks:
        return
    if b >= tl.load(nblocks_ptr):
        return
    g = tl.load(block_group_ptr + b).to(tl.int64)
    if b > 0:  # one prefetch per group: only its first block issues it
        if tl.load(block_group_ptr + b - 1).to(tl.int64) == g:
            return
    which = tl.program_id(1) // pieces
    piece = tl.program_id(1) % pieces
    base = w0_ptr.to(tl.pointer_type(tl.int8))
    if which == 1:
        base = w1_ptr.to(tl.pointer_type(tl.int8))
    start = (piece * N_CHUNKS + tl.arange(0, N_CHUNKS)).to(tl.int64) * CHUNK_BYTES
    on = start < group_bytes
    nbytes = tl.minimum(group_bytes - start, CHUNK_BYTES).to(tl.int32)
    _bulk_prefetch_l2(base + g * group_bytes + start, on, nbytes, EVICT_LAST)


def available(device) -> bool:
    """Bulk L2 prefetch needs a real sm_90+ GPU (inline PTX; none under the interpreter)."""
    device = torch.device(device)
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def prefetch_groups(weights: tuple[torch.Tensor, ...], al: Alignment, n_blocks: int,
                    evict_last: bool = True) -> None:
    """Prefetch into L2 the whole [N, K] matrix of every group owning one of the first n_blocks
    blocks of `al`, for one or two stacked [G, N, K] weight tensors (gate and up)."""
    if not 1 <= len(weights) <= 2:
        raise ValueError("prefetch_groups: pass one or two weight tensors")
    w0 = weights[0]
    if any(w.shape != w0.shape or w.stride() != w0.stride() or not w.is_contiguous()
           for w in weights):
        raise ValueError("prefetch_groups: the weights must be contiguous and of one shape")
    n_blocks = min(n_blocks, al.max_blocks)
    if n_blocks <= 0:
        return
    group_bytes = w0[0].numel() * w0.element_size()
    if group_bytes % 16:
        raise ValueError("prefetch_groups: a group's bytes must be a multiple of 16")
    n_chunks = triton.next_power_of_2(max(1, PIECE // CHUNK))
    pieces = triton.cdiv(group_bytes, n_chunks * CHUNK)
    _prefetch_groups_kernel[(n_blocks, len(weights) * pieces)](
        w0, weights[-1], al.block_group, al.num_blocks, n_blocks, group_bytes, pieces,
        CHUNK_BYTES=CHUNK, N_CHUNKS=n_chunks, EVICT_LAST=evict_last,
        num_warps=max(1, min(8, n_chunks // 32)),
    )
