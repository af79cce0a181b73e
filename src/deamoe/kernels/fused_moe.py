"""Baseline fused MoE for decoding, built on the shared grouped-GEMM primitive.

  align ids by expert -> [x @ gate^T, x @ up^T] -> silu(g) * u  (one GEMM, SwiGLU epilogue)
                      -> h @ down^T * w[p], atomically summed over the token's k experts
Launches: align (1, its spare programs zero the fp32 output), two GEMMs (2), cast to x.dtype (1).
The weights are those of `deamoe.model.layers.MoE`: gate/up [E, h_ffn, h], down [E, h, h_ffn].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deamoe.kernels.align import AlignSpec, _bounds, align
from deamoe.kernels.chain import DEP_BLOCK, ChainStage, chain_gemm, sync_size
from deamoe.kernels.grouped_gemm import (
    EPI_ACT,
    EPI_SWIGLU,
    ROW_PAIR,
    ROW_TOKEN,
    TileConfig,
    grouped_gemm,
)
from deamoe.kernels.routing_topk import route_layer


@dataclass(frozen=True)
class MoETiles:
    """Tile shapes of the two GEMMs and the rows per padded block; chain: both GEMMs in one
    launch (chain.py) instead of one launch each."""

    block_m: int = 16
    w13: TileConfig = TileConfig()
    w2: TileConfig = TileConfig()
    chain: bool = False


def fused_moe_stages(x, gate, up, down, ids, weights, tiles: MoETiles = MoETiles()):
    """(out, [(stage name, launch, weight tensors it streams)]) -- run the launches in order.

    The split lets the sibling benchmark time each GEMM; `fused_moe` just runs them all.
    """
    T, h = x.shape
    E, f, _ = gate.shape
    if ids.shape != weights.shape or ids.shape[0] != T:
        raise ValueError(f"fused_moe: ids {tuple(ids.shape)} / weights {tuple(weights.shape)} vs x {tuple(x.shape)}")
    x = x.contiguous()
    weights = weights.contiguous()
    hidden = torch.empty(ids.numel(), f, dtype=x.dtype, device=x.device)
    spec = AlignSpec(n_groups=E, block_m=tiles.block_m)
    # the chain's int32 counters sit behind `out` in one buffer that align zeroes
    n_sync = 1 + _bounds(ids.numel(), spec)[1] if tiles.chain else 0
    acc = torch.empty(T * h + n_sync, dtype=torch.float32, device=x.device)
    out, sync = acc[: T * h].view(T, h), acc[T * h :].view(torch.int32)
    al = []

    def do_align():  # also zeroes `out`, the atomic accumulator of w2
        al[:] = align(ids, spec, zero=acc)

    w13 = dict(a=x, bg=gate, bu=up, c=hidden, a_mode=ROW_TOKEN, c_mode=ROW_PAIR, epi=EPI_SWIGLU,
               tile=tiles.w13)
    w2 = dict(a=hidden, bg=down, c=out, a_mode=ROW_PAIR, c_mode=ROW_TOKEN, epi=EPI_ACT,
              atomic=True, tile=tiles.w2)
    if tiles.chain:
        def run_chain():
            chain = [ChainStage(grouping=0, sig=DEP_BLOCK, **w13),
                     ChainStage(grouping=0, weighted=True, dep=DEP_BLOCK, **w2)]
            assert sync.numel() >= sync_size(chain, al, 1)
            chain_gemm(chain, al, ids, weights, sync)
        def align_and_chain():  # one stage: the chain's counters are reset by this align
            do_align()
            run_chain()
        return out, [("align+chain", align_and_chain, ((gate, 1), (up, 1), (down, 1)))]

    stages = [
        ("align", do_align, ()),
        ("w13", lambda: grouped_gemm(al=al[0], ids=ids, **w13), (gate, up)),
        ("w2", lambda: grouped_gemm(al=al[0], ids=ids, weights=weights, **w2), (down,)),
    ]
    return out, stages


def fused_moe(x, gate, up, down, ids, weights, tiles: MoETiles = MoETiles()) -> torch.Tensor:
    """out[t] = sum_s weights[t, s] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])), e = ids[t, s]."""
    out, stages = fused_moe_stages(x, gate, up, down, ids, weights, tiles)
    for _, launch, _ in stages:
        launch()
    return out.to(x.dtype)


def fused_moe_layer(layer, x: torch.Tensor, ids=None, weights=None, tiles: MoETiles = MoETiles()):
    """Run a `deamoe.model.layers.MoE` with the kernel (routing by the layer's router unless given)."""
    lead, h = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, h)
    if ids is None:
        ids, weights = route_layer(layer, x)
    out = fused_moe(x, layer.gate_proj, layer.up_proj, layer.down_proj, ids, weights, tiles)
    return out.reshape(*lead, h)
