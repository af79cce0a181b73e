"""deamoe.model.mix_rows: the Triton kernel (under the interpreter on CPU) equals torch.bmm,
forward and both gradients, in float64 and for strided (transposed) mixing matrices, eager and
inside a torch.compile graph (as the custom op deamoe::mix_rows)."""

from __future__ import annotations

import pytest
import torch

from deamoe.model.mix_rows import Mix, dots, mix


@pytest.mark.parametrize("A,B,D", [(5, 8, 48), (8, 5, 130), (3, 1, 7), (2, 3, 1100)])
def test_mix_kernel_and_dots_equal_bmm_in_float64(A, B, D):
    torch.manual_seed(0)
    m = torch.randn(6, B, A, dtype=torch.float64).transpose(1, 2)  # strided, as the callers pass
    rows = torch.randn(6, B, D, dtype=torch.float64)
    g = torch.randn(6, A, D, dtype=torch.float64)
    assert torch.allclose(mix(m, rows, use_triton=True), torch.bmm(m, rows), rtol=1e-12, atol=1e-12)
    assert torch.allclose(dots(g, rows), torch.bmm(g, rows.transpose(1, 2)),
                          rtol=1e-12, atol=1e-12)


def test_mix_gradients_equal_bmm_gradients_in_float64():
    torch.manual_seed(0)
    m = torch.randn(4, 5, 8, dtype=torch.float64, requires_grad=True)
    rows = torch.randn(4, 8, 40, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 5, 40, dtype=torch.float64)
    got = torch.autograd.grad(Mix.apply(m, rows, True), (m, rows), g)
    want = torch.autograd.grad(torch.bmm(m, rows), (m, rows), g)
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_mix_of_a_one_hot_matrix_copies_rows_exactly_in_float32():
    """Each result row is one input row (one-hot m): the float32 accumulation adds only zeros."""
    torch.manual_seed(0)
    slot = torch.randint(0, 5, (8, 8))
    m = torch.nn.functional.one_hot(slot, 5).float().transpose(1, 2)  # [T, slots, k], strided
    rows = torch.randn(8, 8, 64)
    out = mix(m, rows, use_triton=True)
    for t in range(8):
        for s in range(5):
            assert torch.equal(out[t, s], rows[t][slot[t] == s].sum(0))


def test_the_kernel_is_a_well_formed_custom_op():
    """torch.library's own checks: schema, fake (meta) shapes and strides, autograd registration."""
    torch.manual_seed(0)
    m = torch.randn(4, 8, 5, dtype=torch.float64).transpose(1, 2)
    rows = torch.randn(4, 8, 40, dtype=torch.float64)
    torch.library.opcheck(torch.ops.deamoe.mix_rows.default, (m, rows))


def test_mix_in_a_compiled_graph_equals_bmm_forward_and_backward():
    """fullgraph: the op traces without a graph break; the graph reads the strided m it is given."""
    torch.manual_seed(0)
    sel = torch.randn(6, 8, 5, dtype=torch.float64, requires_grad=True)
    rows = torch.randn(6, 8, 48, dtype=torch.float64, requires_grad=True)
    g = torch.randn(6, 5, 48, dtype=torch.float64)

    def slot_sum(sel, rows, use_triton):
        return Mix.apply(sel.transpose(1, 2) * 2.0, rows, use_triton)

    compiled = torch.compile(slot_sum, backend="aot_eager", fullgraph=True)
    got = compiled(sel, rows, True)
    want = slot_sum(sel, rows, False)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got, (sel, rows), g),
                    torch.autograd.grad(want, (sel, rows), g)):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_no_tokens_give_an_empty_result():
    assert mix(torch.randn(0, 5, 8), torch.randn(0, 8, 16), use_triton=True).shape == (0, 5, 16)
