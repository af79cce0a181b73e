"""deamoe.model.grouped.grouped_mm: each group's rows times its weight, forward and backward, and
the contract for rows after the last group (not multiplied; undefined in the result and in x's
gradient; their values and their incoming gradient reach nothing else)."""

from __future__ import annotations

import pytest
import torch

from deamoe.model.grouped import grouped_mm


def _case(dtype, device="cpu"):
    torch.manual_seed(0)
    counts = torch.tensor([3, 0, 5, 2], device=device)  # 10 grouped rows, an empty group, 6 after
    x = torch.randn(16, 24, dtype=dtype, device=device)
    x[10:] = float("nan")  # rows after the last group: their values must not matter
    w = torch.randn(4, 16, 24, dtype=dtype, device=device)
    g = torch.randn(16, 16, dtype=dtype, device=device)
    g[10:] = float("nan")  # nor the gradient sent back for them
    return counts, x.requires_grad_(), w.requires_grad_(), g


def _by_loop(counts, x, w):
    """Each grouped row against its own group's matrix, in float64."""
    group = torch.repeat_interleave(torch.arange(len(counts), device=x.device), counts)
    n = group.numel()
    return torch.einsum("ah,aoh->ao", x[:n].double(), w.double()[group])


def test_rows_after_the_last_group_are_nan_in_the_result_and_in_x_gradient():
    counts, x, w, g = _case(torch.float64)
    y = grouped_mm(x, w, counts)
    assert y.shape == (16, 16) and torch.isnan(y[10:]).all()
    assert torch.allclose(y[:10], _by_loop(counts, x, w), rtol=1e-12, atol=1e-12)
    gx, gw = torch.autograd.grad(y, (x, w), g)
    want_gx, want_gw = torch.autograd.grad(_by_loop(counts, x, w), (x, w), g[:10])
    assert torch.allclose(gx[:10], want_gx[:10], rtol=1e-12, atol=1e-12) and torch.isnan(gx[10:, 0]).all()
    assert torch.isfinite(gw).all() and torch.allclose(gw, want_gw, rtol=1e-12, atol=1e-12)


def test_all_rows_grouped_is_the_plain_grouped_product():
    counts, x, w, _ = _case(torch.float64)
    x = x.detach()[:10]
    assert torch.allclose(grouped_mm(x, w.detach(), counts), _by_loop(counts, x, w.detach()))


def test_more_grouped_rows_than_rows_is_an_error():
    with pytest.raises(RuntimeError):
        grouped_mm(torch.randn(4, 8), torch.randn(2, 8, 8), torch.tensor([3, 2]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="needs a Hopper-class CUDA GPU (the torch._grouped_mm path)")
def test_grouped_mm_path_ignores_rows_after_the_last_group():
    """The same contract on torch._grouped_mm (bf16): the grouped rows and w's gradient within
    bf16 rounding (relative error < 2e-2) of float64, and w's gradient finite although x and
    the incoming gradient hold NaN in the rows after the last group."""
    counts, x, w, g = _case(torch.bfloat16, "cuda")
    y = grouped_mm(x, w, counts)
    gx, gw = torch.autograd.grad(y, (x, w), g)
    want_y = _by_loop(counts, x, w)
    want_gx, want_gw = torch.autograd.grad(want_y, (x, w), g[:10])

    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()
    assert rel(y[:10], want_y) < 2e-2 and rel(gx[:10], want_gx[:10]) < 2e-2
    assert torch.isfinite(gw).all() and rel(gw, want_gw) < 2e-2
