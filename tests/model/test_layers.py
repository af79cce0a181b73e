import pytest
import torch

from deamoe.analysis.budget import ffn_params
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.model.layers import DeaMoE, MoE, build_ffn, operator, reference_forward
from deamoe.routing import route

SHAPES = [
    MoEShape(h=16, h_ffn=8, n_expert=8, k_expert=2),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=2, k_expert=3),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=3, k_expert=5, dept_topk="strict"),
    DeaMoEShape(h=24, h_ffn=12, n_dept=2, n_expert=6, k_dept=1, k_expert=2, operator="rmsnorm"),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=8, k_dept=2, k_expert=4, operator="gelu"),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=8, k_dept=2, k_expert=4, operator="none"),
    # shared experts (DeepSeekMoE): two of width h_ffn; one of width 2 h_ffn
    MoEShape(h=16, h_ffn=8, n_expert=8, k_expert=2, n_shared=2),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=2, k_expert=3, n_shared=1, shared_mult=2),
    DeaMoEShape(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=2, k_expert=3, n_shared=2),
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


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.n_shared], ids=lambda s: f"{s.kind}")
def test_shared_experts_add_a_dense_swiglu_to_the_routed_part(shape):
    """Layer = routed reference + sum of n_shared dense SwiGLU FFNs, written out here (float64)."""
    layer = randomised(shape)
    x = torch.randn(19, shape.h, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    ids, w = route(shape, layer.router(x))
    sh, width = layer.shared_experts, shape.shared_mult * shape.h_ffn
    assert sh.gate_proj.weight.shape == (shape.n_shared * width, shape.h)
    dense = sum(
        (torch.nn.functional.silu(x @ sh.gate_proj.weight[i * width:(i + 1) * width].T)
         * (x @ sh.up_proj.weight[i * width:(i + 1) * width].T))
        @ sh.down_proj.weight[:, i * width:(i + 1) * width].T
        for i in range(shape.n_shared)
    )
    routed = build_ffn(shape.replace(n_shared=0)).double()
    routed.load_state_dict({k: v for k, v in layer.state_dict().items() if "shared" not in k})
    expected = reference_forward(routed, x, ids, w) + dense
    torch.testing.assert_close(layer(x), expected, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(layer(x), reference_forward(routed, x, ids, w))


def test_no_shared_experts_by_default():
    for shape in SHAPES:
        if not shape.n_shared:
            assert build_ffn(shape).shared_experts is None
            assert not any("shared" in k for k in build_ffn(shape).state_dict())


@pytest.mark.parametrize("field,value", [("n_shared", -1), ("shared_mult", 0), ("n_shared", 1.5)])
def test_bad_shared_fields_are_named(field, value):
    from deamoe.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        MoEShape(h=16, h_ffn=8, n_expert=8, k_expert=2, **{field: value})
