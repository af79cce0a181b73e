"""deamoe.decode.step: one layer's decode step on the Triton kernels (the interpreter on the
CPU) equals the PyTorch layer, with the routing run inside, given, or from given logits."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.decode.step import ffn_step, routing_fn, routing_label, step_routing
from deamoe.decode.weights import layer_weights, random_weights
from deamoe.kernels.shared_expert import SharedTiles
from deamoe.model.layers import build_ffn, reference_forward
from deamoe.routing import route
from deamoe.shapes import DeaMoEShape, MoEShape

MOE = MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4)
DEA = DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5)


def _layer(shape):
    """A PyTorch layer of `shape` with non-trivial weights, and its tensors under the step's
    names (deamoe.decode.weights.layer_weights)."""
    torch.manual_seed(1)
    layer = build_ffn(shape.replace(expert_init="random") if shape.kind == "deamoe" else shape,
                      init_std=0.1)
    return layer, layer_weights(layer)


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_ffn_step_runs_the_kernel(shape):
    # router GEMM -> deamoe.routing.route -> kernel: the reference layer with the same weights
    # and routing gives the same output
    layer, w = _layer(shape)
    x = torch.randn(3, shape.h)
    ids, weights = route(shape, torch.nn.functional.linear(x, w["router"]))
    with torch.no_grad():
        torch.testing.assert_close(ffn_step(shape, w, x),
                                   reference_forward(layer, x, ids, weights), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [MOE.replace(n_shared=2), DEA.replace(n_shared=1)],
                         ids=["moe", "deamoe"])
def test_ffn_step_with_shared_experts_equals_the_layer_reference(shape):
    layer, w = _layer(shape)
    with torch.no_grad():
        x = torch.randn(7, shape.h, generator=torch.Generator().manual_seed(3))
        ids, weights = route(shape, x @ w["router"].T)
        ref = reference_forward(layer, x, ids, weights)
        for tiles in (None, SharedTiles(stream=True)):
            torch.testing.assert_close(ffn_step(shape, w, x, shared=tiles), ref,
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_step_with_precomputed_routing_is_the_same_step(shape):
    # the peer comparison times the step without its router GEMM and routing: same output
    w = random_weights(shape, "cpu", dtype=torch.float32, seed=4)
    x = torch.randn(5, shape.h, generator=torch.Generator().manual_seed(4))
    routed = step_routing(shape, w, x)
    ref = ffn_step(shape, w, x)
    torch.testing.assert_close(ffn_step(shape, w, x, routed=routed), ref)
    assert not torch.equal(ffn_step(shape, w, x, routed=(routed[0].flip(1), routed[1])), ref)


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_step_from_logits_routes_the_given_logits(shape):
    # the peer comparison times the step from the router logits (vLLM's fused_moe input):
    # same output as the full step for the router's own logits, another for other logits
    w = random_weights(shape, "cpu", dtype=torch.float32, seed=5)
    x = torch.randn(5, shape.h, generator=torch.Generator().manual_seed(5))
    logits = torch.nn.functional.linear(x, w["router"])
    ref = ffn_step(shape, w, x)
    torch.testing.assert_close(ffn_step(shape, w, x, logits=logits), ref)
    assert not torch.allclose(ffn_step(shape, w, x, logits=logits.flip(1)), ref)
    with pytest.raises(ValueError, match="routed or logits"):
        ffn_step(shape, w, x, routed=(None, None), logits=logits)


def test_routing_of_a_step_is_the_kernel_on_cuda_and_the_reference_elsewhere():
    # both layers route the same way: deamoe.routing.route itself on the CPU (what the
    # microbench.csv `routing` column says), its tested Triton twin on CUDA
    from deamoe.kernels.routing_topk import route_kernel

    assert routing_fn(torch.zeros(1, 4)) is route and routing_label("cpu") == "eager route"
    assert routing_label("cuda") == "triton route kernel"
    if torch.cuda.is_available():
        assert routing_fn(torch.zeros(1, 4, device="cuda")) is route_kernel


@pytest.mark.parametrize("shape", [MOE.replace(n_shared=1), DEA], ids=["moe", "deamoe"])
def test_layer_weights_are_the_layers_own_tensors_under_the_steps_names(shape):
    layer = build_ffn(shape)
    w = layer_weights(layer)
    assert set(w) == set(random_weights(shape, "cpu", torch.float32)) | {"expert_bias"}
    assert w["router"] is layer.router.weight and w["expert_bias"] is layer.expert_bias
    if shape.n_shared:
        assert w["shared_down"] is layer.shared_experts.down_proj.weight
    else:
        assert w["expert_down"] is layer.expert_down


def test_the_steps_weight_names_are_the_kernels():
    from deamoe.decode.weights import DEAMOE_WEIGHTS
    from deamoe.kernels.deamoe_decode import DeaMoEWeights

    assert DeaMoEWeights._fields == DEAMOE_WEIGHTS
