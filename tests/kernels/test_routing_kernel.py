"""The Triton routing kernel equals deamoe.routing.route (Triton interpreter on the CPU)."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.kernels.routing_topk import compare_with_reference, group_limited_topk, route_kernel
from deamoe.routing import route

SHAPES = [
    MoEShape(h=8, h_ffn=8, n_expert=32, k_expert=4),
    MoEShape(h=8, h_ffn=8, n_expert=64, k_expert=8, routed_scaling=2.5),
    MoEShape(h=8, h_ffn=8, n_expert=20, k_expert=3),  # not a power of two: masked lanes
    DeaMoEShape(h=8, h_ffn=8, n_dept=4, n_expert=32, k_dept=2, k_expert=5),
    DeaMoEShape(h=8, h_ffn=8, n_dept=8, n_expert=64, k_dept=4, k_expert=10, routed_scaling=2.5),
    DeaMoEShape(h=8, h_ffn=8, n_dept=8, n_expert=32, k_dept=3, k_expert=6),
    DeaMoEShape(h=8, h_ffn=8, n_dept=6, n_expert=42, k_dept=3, k_expert=8),  # 7 per dept
    DeaMoEShape(h=8, h_ffn=8, n_dept=4, n_expert=32, k_dept=3, k_expert=4, dept_topk="strict"),
    DeaMoEShape(h=8, h_ffn=8, n_dept=8, n_expert=64, k_dept=5, k_expert=10, dept_topk="strict"),
    DeaMoEShape(h=8, h_ffn=8, n_dept=4, n_expert=4, k_dept=2, k_expert=2),  # one expert per dept
]


def _name(s):
    kind = f"d{s.n_dept}-{s.dept_topk}" if isinstance(s, DeaMoEShape) else "topk"
    return f"{kind}-e{s.n_expert}-k{s.k_expert}"


@pytest.mark.parametrize("shape", SHAPES, ids=_name)
@pytest.mark.parametrize("with_bias", [False, True])
def test_kernel_equals_reference(shape, with_bias):
    g = torch.Generator().manual_seed(shape.n_expert + shape.k_expert)
    bias = 0.05 * torch.randn(shape.n_expert, generator=g) if with_bias else None
    for T in (1, 24) if with_bias else (1, 5, 64):  # T 1..64; the interpreter runs per token
        logits = 3 * torch.randn(T, shape.n_expert, generator=g)
        r = compare_with_reference(shape, logits, bias)
        assert r["same_sets"] and r["ranked"] and r["distinct_ids"], r
        assert r["max_w_err"] < 1e-5, r


def test_order_and_weights_exactly_like_reference():
    shape = SHAPES[4]
    logits = torch.randn(16, shape.n_expert, generator=torch.Generator().manual_seed(5))
    ids, w = route_kernel(shape, logits)
    ref_ids, ref_w = route(shape, logits)
    assert torch.equal(ids, ref_ids)  # best first, like torch.topk
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)
    torch.testing.assert_close(w.sum(1), torch.full((16,), shape.routed_scaling))


def test_bias_changes_selection_not_weights():
    """A large bias on experts 0..4 forces them in; weights stay renormalised probabilities."""
    shape = MoEShape(h=8, h_ffn=8, n_expert=32, k_expert=5)
    logits = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))
    bias = torch.zeros(32)
    bias[:5] = 10.0
    ids, w = route_kernel(shape, logits, bias)
    assert (ids.sort(1).values == torch.arange(5)).all()
    p = torch.softmax(logits, -1).gather(1, ids)
    torch.testing.assert_close(w, p / p.sum(1, keepdim=True))


def test_bf16_logits_and_strided_rows():
    shape = SHAPES[3]
    full = torch.randn(9, 2 * shape.n_expert, generator=torch.Generator().manual_seed(2))
    logits = full[:, : shape.n_expert]  # row stride != n_expert
    r = compare_with_reference(shape, logits)
    assert r["same_sets"] and r["max_w_err"] < 1e-5, r
    r = compare_with_reference(shape, logits.bfloat16())
    assert r["tie_only"] and r["ranked"], r


def test_bad_arguments_raise():
    logits = torch.randn(2, 30)
    with pytest.raises(ValueError, match="not divisible"):
        group_limited_topk(logits, 4, 2, 3)
    with pytest.raises(ValueError, match="do not fit"):
        group_limited_topk(torch.randn(2, 32), 4, 1, 9)


@pytest.mark.parametrize("name", ["moe-small", "deamoe-small"])
def test_layer_paths_route_with_the_kernel(name):
    """fused_moe_layer / deamoe_layer route with the kernel and still equal the torch layer."""
    from deamoe.kernels.battery import build_layer, small_shapes
    from deamoe.kernels.deamoe_decode import deamoe_layer
    from deamoe.kernels.fused_moe import fused_moe_layer

    shape = small_shapes()[name]
    layer = build_layer(shape, "cpu", seed=4)
    layer.expert_bias.copy_(0.01 * torch.randn(shape.n_expert))
    x = torch.randn(3, shape.h, generator=torch.Generator().manual_seed(4))
    fn = deamoe_layer if isinstance(shape, DeaMoEShape) else fused_moe_layer
    with torch.no_grad():
        out = fn(layer, x)
        kernel_ids = layer.last_ids.clone()
        ref = layer(x)
    assert torch.equal(kernel_ids.sort(1).values, layer.last_ids.sort(1).values)
    assert (out - ref).abs().max() / ref.abs().max() < 1e-4
