"""Baseline fused MoE for decoding, built on the shared grouped-GEMM primitive.

  align ids by expert -> [x @ gate^T, x @ up^T] -> silu(g) * u  (one GEMM, SwiGLU epilogue)
                      -> h @ down^T * w[p], atomically summed over the token's k experts
Launches: align (1, its spare programs zero the output, and the absmax slots of w13's output on
a w8a8 '-qs' tile), two GEMMs (2); a cast to x.dtype (1) only where the output is summed in fp32
(`MoETiles.out_bf16` off, or no bf16 atomics on the device).
With split_launches=n the experts are cut into n contiguous parts, each part's two GEMMs on its
own CUDA stream (the parts share only the atomically summed output), so one part's launch ramp
and tail overlap another's work; the same option as DeaMoE's.
The weights are those of `deamoe.model.layers.MoE`: gate/up [E, h_ffn, h], down [E, h, h_ffn],
bf16 or block-scaled FP8 (deamoe.kernels.fp8.Fp8Weight; activations stay in x's dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.fp8 import check_qout_reads
from deamoe.kernels.fp8_absmax import AbsmaxRows
from deamoe.kernels.tile_config import check_layer_knobs
from deamoe.kernels.fp8_quant import gemm_output
from deamoe.kernels.gemm_spec import EPI_ACT, EPI_SWIGLU, ROW_PAIR, ROW_TOKEN, GemmSpec
from deamoe.kernels.grouped_gemm import (
    TileConfig,
    grouped_gemm,
    layer_output,
    on_tokens,
    run_stages,
)
from deamoe.kernels.routing_topk import route_layer
from deamoe.kernels.streams import run_parallel, split_ranges

# the two GEMMs of a SwiGLU FFN over (token, slot) pairs: gate and up of each pair's token, then
# down summed into the token's row (weighted by the routing where weights are given)
W13 = GemmSpec(a_mode=ROW_TOKEN, c_mode=ROW_PAIR, epi=EPI_SWIGLU)
W2 = GemmSpec(a_mode=ROW_PAIR, c_mode=ROW_TOKEN, epi=EPI_ACT, atomic=True)


@dataclass(frozen=True)
class MoETiles:
    """Tile shapes of the two GEMMs and the rows per padded block."""

    block_m: int = 16
    w13: TileConfig = TileConfig()
    w2: TileConfig = TileConfig()
    # n > 1: the experts in n contiguous parts, each part's two GEMMs on its own CUDA stream
    split_launches: int = 1
    # sum the output in bf16 where the device has bf16 atomics (no cast launch at the end; both
    # layers 1.3-16.5 us faster per layer on the H200, max rel err 4.5e-3); off: fp32 and a cast
    out_bf16: bool = True

    def __post_init__(self):
        check_layer_knobs(self)
        check_qout_reads(self)

    def shared_memory(self, itemsize: int = 2, fp8=None) -> int:
        """The most shared memory one of the layer's GEMMs needs on these tiles
        (GemmSpec.shared_memory; fp8: the Fp8Format of FP8 weights)."""
        return max(W13.on(self.w13).shared_memory(self.block_m, itemsize, fp8),
                   W2.on(self.w2).shared_memory(self.block_m, itemsize, fp8, self.w13.qscale))


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
    hidden = gemm_output(ids.numel(), f, x, tiles.w13, gate)  # e4m3 where w13 is '-qo'
    acc, out = layer_output(x, out_bf16=tiles.out_bf16)
    zero = (acc, hidden.absmax) if isinstance(hidden, AbsmaxRows) else acc
    al = []

    def do_align():  # also zeroes `out`, the atomic accumulator of w2 (and w13's absmax slots)
        al[:] = align(ids, AlignSpec(n_groups=E, block_m=tiles.block_m), zero=zero)

    # each GEMM once; `groups` restricts it to some experts
    w13_spec, w2_spec = W13.on(tiles.w13), W2.on(tiles.w2)

    def w13(groups=None):
        grouped_gemm(x, gate, hidden, al[0], ids, w13_spec, bu=up, groups=groups)

    def w2(groups=None):
        grouped_gemm(hidden, down, out, al[0], ids, w2_spec, weights=weights, groups=groups)

    if tiles.split_launches > 1:
        def split():  # the two GEMMs of each part of the experts on its own stream
            run_parallel([[lambda lo=lo, hi=hi: w13((lo, hi)), lambda lo=lo, hi=hi: w2((lo, hi))]
                          for lo, hi in split_ranges(E, tiles.split_launches)], x.device)
        return out, [("align", do_align, ()), ("gemms", split, (gate, up, down))]

    stages = [("align", do_align, ()), ("w13", w13, (gate, up)), ("w2", w2, (down,))]
    return out, stages


def fused_moe(x, gate, up, down, ids, weights, tiles: MoETiles = MoETiles()) -> torch.Tensor:
    """out[t] = sum_s weights[t, s] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])), e = ids[t, s]."""
    out, stages = fused_moe_stages(x, gate, up, down, ids, weights, tiles)
    return run_stages(out, stages, x)


def fused_moe_layer(layer, x: torch.Tensor, ids=None, weights=None, tiles: MoETiles = MoETiles()):
    """Run a `deamoe.model.layers.MoE` with the kernel (routing by the layer's router unless given)."""
    def run(x2):
        r_ids, r_weights = (ids, weights) if ids is not None else route_layer(layer, x2)
        return fused_moe(x2, layer.gate_proj, layer.up_proj, layer.down_proj, r_ids, r_weights,
                         tiles)
    return on_tokens(x, run)
