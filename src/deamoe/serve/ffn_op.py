"""The body of the vLLM model's FFN op on a GPU: one decode step of a trained MoE / DeaMoE layer on
the project's Triton kernels, with the tiles the microbenchmark picked for its shape and batch.

It imports nothing from vLLM (deamoe.serve.vllm_model wraps it in `torch.ops.deamoe.ffn`), so
it is tested without vLLM: tests/serve/test_ffn_op.py (under Triton's CPU interpreter) and
tests/serve/test_ffn_op_gpu.py (a two-layer decoder in CUDA graphs, on a GPU).

The step is deamoe.bench.layer_step.ffn_step, the function whose CUDA graphs the per-layer
microbenchmark and the model-level decode benchmark time: the router GEMM, the routing
(deamoe.routing.route as its single-launch Triton kernel, with the checkpoint's selection bias),
the on-device alignment and the grouped GEMMs.  Nothing in it reads a device value on the host,
so vLLM's CUDA graphs capture it whole.  The tiles come from deamoe.bench.picks (the committed
H200 table, shipped as package data): the pick of the nearest measured batch for a layer shape
the table measured, the default tiles otherwise.  vLLM captures one graph per batch size, and
the batch is the input's (static) row count, so each graph holds its batch's pick.
"""

from __future__ import annotations

import torch

from deamoe.model.layers import DeaMoE, MoE

_MOE = ("gate_proj", "up_proj", "down_proj")
_DEAMOE = ("dept_gate", "dept_up", "dept_down", "expert_gate", "expert_up", "expert_down")


def layer_weights(layer: MoE | DeaMoE) -> dict:
    """The layer's tensors under the names ffn_step reads (the same tensors, no copies)."""
    names = _DEAMOE if isinstance(layer, DeaMoE) else _MOE
    w = {name: getattr(layer, name) for name in names}
    w["router"] = layer.router.weight
    w["expert_bias"] = layer.expert_bias
    if layer.shape.n_shared:  # ffn_step adds the shared experts itself
        from deamoe.kernels.shared_expert import shared_weights

        w["shared_gate"], w["shared_up"], w["shared_down"] = shared_weights(layer)
    return w


def decode_ffn(layer: MoE | DeaMoE, x: torch.Tensor, picks=None) -> torch.Tensor:
    """layer(x) on the Triton kernels: x [..., h] -> [..., h].

    picks: a deamoe.bench.picks.TilePicks, or None for the packaged H200 picks."""
    from deamoe.bench.layer_step import ffn_step
    from deamoe.bench.picks import packaged

    lead, h = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, h)
    tiles = (picks if picks is not None else packaged()).tiles(layer.shape, x.shape[0])
    return ffn_step(layer.shape, layer_weights(layer), x, tiles=tiles).reshape(*lead, h)


def kernels_available() -> bool:
    """Whether Triton (and so deamoe.kernels) can be imported."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
