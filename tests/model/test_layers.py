import pytest
import torch

from deamoe.analysis.budget import ffn_params
from deamoe.config import DeaMoEShape, MoEShape
from deamoe.model.layers import DeaMoE, MoE, build_ffn, operator, reference_forward
from deamoe.routing import route

SHAPES = [
    MoEShape(h=16, h_ffn=8, n_expert=8, k_expert=2),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=2, k_expert=3),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=3, k_expert=5, dept_topk="strict"),
    DeaMoEShape(h=24, h_ffn=12, n_dept=2, n_expert=6, k_dept=1, k_expert=2, operator="rmsnorm"),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=8, k_dept=2, k_expert=4, operator="gelu"),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=8, k_dept=2, k_expert=4, operator="none"),
]


def randomised(shape):
    layer = build_ffn(shape).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / p.shape[-1] ** 0.5)
    return layer


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.kind}")
def test_parameter_count_equals_budget_formula(shape):
    layer = build_ffn(shape)
    assert sum(p.numel() for p in layer.parameters()) == ffn_params(shape)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.kind}")
def test_two_stage_forward_equals_per_expert_reference(shape):
    layer = randomised(shape)
    x = torch.randn(53, shape.h, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ids, w = route(shape, layer.router(x))
    torch.testing.assert_close(layer(x), reference_forward(layer, x, ids, w), rtol=1e-10, atol=1e-10)


def test_all_tokens_on_one_expert_and_batched_input():
    shape = SHAPES[1]
    layer = randomised(shape)
    x = torch.randn(2, 5, shape.h, dtype=torch.float64)
    ids = torch.tensor([[0, 1, 2]]).repeat(10, 1)  # all tokens in department 0
    w = torch.full((10, 3), 1 / 3, dtype=torch.float64)
    out = layer(x, ids, w)
    assert out.shape == x.shape
    torch.testing.assert_close(out.reshape(10, -1), reference_forward(layer, x.reshape(10, -1), ids, w))


def test_identity_init_makes_every_expert_its_department_backbone():
    shape = DeaMoEShape(h=16, h_ffn=8, n_dept=2, n_expert=8, k_dept=1, k_expert=1)
    layer = DeaMoE(shape).double()
    x = torch.randn(6, 16, dtype=torch.float64)
    one = torch.ones(6, 1, dtype=torch.float64)
    outs = [reference_forward(layer, x, torch.full((6, 1), e), one) for e in range(8)]
    sigma = operator("silu")
    for dept in range(2):
        backbone = (
            layer.dept_down[dept]
            @ sigma(torch.nn.functional.silu(sigma(layer.dept_gate[dept] @ x.T)) * sigma(layer.dept_up[dept] @ x.T))
        ).T
        for e in range(dept * 4, dept * 4 + 4):
            torch.testing.assert_close(outs[e], backbone)
    assert not torch.allclose(outs[0], outs[4])


def test_random_init_differs_from_identity():
    shape = DeaMoEShape(h=16, h_ffn=8, n_dept=2, n_expert=8, k_dept=1, k_expert=1, expert_init="random")
    layer = DeaMoE(shape)
    assert not torch.allclose(layer.expert_gate[0], torch.eye(8))
    assert layer.expert_gate.std().item() == pytest.approx(0.02, rel=0.3)


@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: s.kind)
def test_gradients_reach_every_parameter_family(shape):
    layer = randomised(shape).float()
    x = torch.randn(64, shape.h)
    layer(x).pow(2).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
