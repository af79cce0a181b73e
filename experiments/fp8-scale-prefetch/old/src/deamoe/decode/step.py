"""One layer's decode step: router GEMM -> routing -> the layer's Triton kernels (+ shared experts).

The same function runs inside vLLM (deamoe.serve.ffn_op) and under the benchmarks' timers
(deamoe.bench): the router GEMM, deamoe.routing.route (on CUDA its single-launch Triton kernel,
with the layer's selection bias), the on-device alignment and the grouped GEMMs of the baseline
(deamoe.kernels.fused_moe) or DeaMoE (deamoe.kernels.deamoe_decode), then the shared experts
(deamoe.kernels.shared_expert).  Nothing in it reads a device value on the host, so a CUDA graph
captures it whole.  Weights: a dict under the names of deamoe.decode.weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deamoe.routing import route
from deamoe.shapes import DeaMoEShape


def routing_fn(logits: torch.Tensor):
    """deamoe.routing.route for a decode step, the same for both layers: on CUDA its
    single-launch Triton implementation (deamoe.kernels.routing_topk, tested equal to it),
    elsewhere the torch code itself."""
    if logits.is_cuda:
        from deamoe.kernels.routing_topk import route_kernel

        return route_kernel
    return route


def routing_label(device) -> str:
    """What routes the steps on `device` (routing_fn's choice, as microbench.csv names it)."""
    return "triton route kernel" if torch.device(device).type == "cuda" else "eager route"


def step_routing(shape, w: dict, x: torch.Tensor):
    """(ids, weights) of one decode step: the router GEMM, then deamoe.routing.route (routing_fn)
    with the layer's selection bias w["expert_bias"] where the weights have one (a trained
    checkpoint's; the benchmark's random weights have none)."""
    logits = F.linear(x, w["router"])
    return routing_fn(logits)(shape, logits, w.get("expert_bias"))


def ffn_step(shape, w: dict, x: torch.Tensor, tiles=None, routed=None, logits=None,
             shared=None) -> torch.Tensor:
    """The layer's output [T, h] for x [T, h] on the Triton kernels, on `tiles` (MoETiles /
    DeaMoETiles; None: the defaults).  routed: (ids, weights) computed beforehand -- the step
    then runs no router GEMM and no routing.  logits: the router's output computed beforehand --
    the step routes them but runs no router GEMM, as vLLM's fused_moe is called and timed (from
    the gating output).  A shape with shared experts adds them (deamoe.kernels.shared_expert,
    `shared`: its SharedTiles)."""
    if routed is not None and logits is not None:
        raise ValueError("ffn_step: give routed or logits, not both")

    def routing():
        if logits is not None:
            return routing_fn(logits)(shape, logits, w.get("expert_bias"))
        return step_routing(shape, w, x)

    def step():
        return _routed_step(shape, w, x, tiles, routed if routed is not None else routing)

    if not shape.n_shared:
        return step()
    from deamoe.kernels.shared_expert import SharedTiles, with_shared

    return with_shared(step, x, w["shared_gate"], w["shared_up"], w["shared_down"],
                       shared or SharedTiles())


def _routed_step(shape, w, x, tiles, routing) -> torch.Tensor:
    """ffn_step without the shared experts; routing: (ids, weights), or a callable giving them."""
    if isinstance(shape, DeaMoEShape):
        from deamoe.kernels.deamoe_decode import DeaMoETiles, DeaMoEWeights, deamoe_forward

        # the kernel runs the routing itself: beside its department up-projection when
        # tiles.dense_dept_up, else first, as here for the baseline
        ids, weights = (None, None) if callable(routing) else routing
        return deamoe_forward(x, DeaMoEWeights.of(w), ids, weights, operator=shape.operator,
                              tiles=tiles or DeaMoETiles(),
                              route=routing if callable(routing) else None)
    from deamoe.kernels.fused_moe import MoETiles, fused_moe

    ids, weights = routing() if callable(routing) else routing
    return fused_moe(x, w["gate_proj"], w["up_proj"], w["down_proj"], ids, weights,
                     tiles or MoETiles())
