"""Always-active shared experts beside either decode layer, on the same grouped-GEMM primitive.

The shared experts are one dense SwiGLU FFN of width S = n_shared * shared_mult * h_ffn
(deamoe.model.layers.SharedExperts: gate/up [S, h], down [h, S]).  Dense means every token is in
the one group, so the alignment is `dense_alignment(T, 1, 1, block_m)` (pair p = token t, no
routing needed) and the FFN is two launches of the primitive, as the baseline's experts are:
  w13   H[t]   = silu(gate x_t) * (up x_t)            (EPI_SWIGLU, one group)
  w2    out[t] += down H[t]                           (atomic, unweighted)
w2 adds into the routed layer's output after the routed layer has written it (its align launch
zeroes that buffer), so it runs last.  w13 needs only x: with `SharedTiles.stream` it runs on a
side stream of its own, forked before the routed layer and joined before w2, so the shared
up-projection streams beside the routed launches (a fork/join a CUDA graph captures; on the
CPU the same launches run one after another).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from deamoe.kernels.align import dense_alignment
from deamoe.kernels.fused_moe import W2, W13
from deamoe.kernels.grouped_gemm import bf16_atomics, grouped_gemm
from deamoe.kernels.tile_config import TileConfig
from deamoe.kernels.streams import side_stream

# index of the shared experts' own side stream: apart from the ones a layer's split_launches
# and dense_dept_up schedules take (0, 1, ...), so neither waits behind the other's launches
SHARED_STREAM = -1


@dataclass(frozen=True)
class SharedTiles:
    """Rows per block and the tiles of the two GEMMs; stream: w13 beside the routed layer."""

    block_m: int = 16
    w13: TileConfig = TileConfig()
    w2: TileConfig = TileConfig()
    stream: bool = False


def shared_weights(layer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(gate [S, h], up [S, h], down [h, S]) of a layer's shared experts."""
    s = layer.shared_experts
    return s.gate_proj.weight, s.up_proj.weight, s.down_proj.weight


def with_shared(routed: Callable[[], torch.Tensor], x: torch.Tensor, gate, up, down,
                tiles: SharedTiles = SharedTiles()) -> torch.Tensor:
    """routed() -> the routed layer's output [T, h] for x [T, h]; returns it with the shared
    FFN down @ (silu(gate @ x) * (up @ x)) added to every row (in place where it can)."""
    T = x.shape[0]
    x = x.contiguous()
    al, ids = dense_alignment(T, 1, 1, tiles.block_m, x.device)
    hidden = torch.empty(T, gate.shape[0], dtype=x.dtype, device=x.device)

    def w13():
        grouped_gemm(x, gate[None], hidden, al, ids, W13.on(tiles.w13), bu=up[None])

    fork = tiles.stream and x.is_cuda
    if fork:
        main, side = torch.cuda.current_stream(x.device), side_stream(x.device, SHARED_STREAM)
        side.wait_stream(main)  # fork: x is ready
        with torch.cuda.stream(side):
            w13()
    else:
        w13()
    out = routed()
    if fork:
        main.wait_stream(side)  # join: H is ready (and the side stream rejoins a captured graph)
    # the unweighted sum into the routed output: atomics where they exist for its dtype (fp32;
    # bf16 on a GPU), else (bf16 under the interpreter) through an fp32 buffer
    direct = out.dtype == torch.float32 or (out.dtype == torch.bfloat16 and bf16_atomics(out))
    target = out if direct else torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    grouped_gemm(hidden, down[None], target, al, ids, W2.on(tiles.w2))
    return out if direct else out.add_(target.to(out.dtype))


def shared_layer(layer, x: torch.Tensor, routed: Callable[[], torch.Tensor],
                 tiles: SharedTiles = SharedTiles()) -> torch.Tensor:
    """A `deamoe.model.layers` MoE / DeaMoE layer's output: routed() (its decode kernel), plus
    its shared experts when it has them."""
    if not layer.shape.n_shared:
        return routed()
    lead, h = x.shape[:-1], x.shape[-1]
    out = with_shared(lambda: routed().reshape(-1, h), x.reshape(-1, h),
                      *shared_weights(layer), tiles)
    return out.reshape(*lead, h)
