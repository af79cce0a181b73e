"""The body of the vLLM model's FFN op on a GPU: one decode step of a trained MoE / DeaMoE layer on
the project's Triton kernels, with the tiles the microbenchmark picked for its shape and batch.

It imports nothing from vLLM (deamoe.serve.vllm_model wraps it in `torch.ops.deamoe.ffn`), so
it is tested without vLLM: tests/serve/test_ffn_op.py (under Triton's CPU interpreter) and
tests/serve/test_ffn_op_gpu.py (a two-layer decoder in CUDA graphs, on a GPU).

The step is deamoe.decode.step.ffn_step, the function whose CUDA graphs the per-layer
microbenchmark and the model-level decode benchmark time: the router GEMM, the routing
(deamoe.routing.route as its single-launch Triton kernel, with the checkpoint's selection bias),
the on-device alignment and the grouped GEMMs.  Nothing in it reads a device value on the host,
so vLLM's CUDA graphs capture it whole.  The tiles come from deamoe.decode.picks (the committed
H200 table, shipped as package data): the pick of the nearest measured batch for a layer shape
the table measured, the default tiles otherwise.  vLLM captures one graph per batch size, and
the batch is the input's (static) row count, so each graph holds its batch's pick.
"""

from __future__ import annotations

import torch

from deamoe.decode import step
from deamoe.decode.picks import packaged
from deamoe.decode.weights import layer_weights
from deamoe.model.layers import DeaMoE, MoE


def decode_ffn(layer: MoE | DeaMoE, x: torch.Tensor, picks=None) -> torch.Tensor:
    """layer(x) on the Triton kernels: x [..., h] -> [..., h].

    picks: a deamoe.decode.picks.TilePicks, or None for the packaged H200 picks."""
    lead, h = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, h)
    tiles = (picks if picks is not None else packaged()).tiles(layer.shape, x.shape[0])
    return step.ffn_step(layer.shape, layer_weights(layer), x, tiles=tiles).reshape(*lead, h)


def kernels_available() -> bool:
    """Whether Triton (and so deamoe.kernels) can be imported."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
