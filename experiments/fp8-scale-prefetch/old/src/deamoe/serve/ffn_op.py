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
from deamoe.decode.weights import fp8_weights, layer_weights
from deamoe.model.layers import DeaMoE, MoE


def decode_ffn(layer: MoE | DeaMoE, x: torch.Tensor, picks=None, fp8=None) -> torch.Tensor:
    """layer(x) on the Triton kernels: x [..., h] -> [..., h].

    picks: a deamoe.decode.picks.TilePicks, or None for the packaged H200 picks.  fp8: a
    deamoe.kernels.fp8.Fp8Format: the layer runs on its FFN matrices block-quantised in it
    (`fp8_layer_weights`, quantised at the first call), with that precision's picks."""
    lead, h = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, h)
    tiles = (picks if picks is not None else packaged()).tiles(layer.shape, x.shape[0], fp8)
    w = layer_weights(layer) if fp8 is None else fp8_layer_weights(layer, fp8)
    return step.ffn_step(layer.shape, w, x, tiles=tiles).reshape(*lead, h)


def fp8_layer_weights(layer: MoE | DeaMoE, fmt) -> dict:
    """The layer's step weights with its FFN matrices in `fmt` (deamoe.decode.weights.
    fp8_weights), quantised once and kept on the layer for the format and the weights it was
    made from (a reload of the weights makes it again): call it eagerly before a CUDA graph
    captures the step, as vLLM's warm-up does, so the capture holds no quantisation."""
    w = layer_weights(layer)
    made_from = tuple(t.data_ptr() for t in w.values() if isinstance(t, torch.Tensor))
    cache = layer.__dict__.setdefault("_fp8_weights", {})
    if cache.get(fmt, (None,))[0] != made_from:
        cache[fmt] = (made_from, fp8_weights(w, fmt))
    return cache[fmt][1]


def kernels_available() -> bool:
    """Whether Triton (and so deamoe.kernels) can be imported."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
