"""The Triton router GEMM (split-K partials) and the routing kernel that sums them (interpreter)."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.config import DeaMoEShape, MoEShape
from deamoe.kernels.router_gemm import BLOCK_K, router_partials, split_plan
from deamoe.kernels.routing_topk import route_kernel
from deamoe.routing import route


@pytest.mark.parametrize("T,E,K", [(1, 32, 64), (5, 20, 300), (37, 96, 1024), (70, 40, 520)])
def test_partials_sum_to_the_matmul(T, E, K):
    # E not a multiple of the 32-wide tile, K not one of BLOCK_K, T over one 64-row block (70)
    g = torch.Generator().manual_seed(T + E + K)
    x, w = torch.randn(T, K, generator=g), torch.randn(E, K, generator=g)
    parts = router_partials(x, w)
    splits, _, _ = split_plan(T, E, K)
    assert parts.shape == (splits, T, E) and parts.dtype == torch.float32
    torch.testing.assert_close(parts.sum(0), x @ w.T, rtol=1e-4, atol=1e-4)


def test_split_plan_covers_k_once():
    for T, E, K in [(4, 256, 1024), (4, 864, 7168), (128, 128, 4096), (16, 320, 4096),
                    (1, 8, 64), (200, 672, 1024)]:
        splits, k_per, block_m = split_plan(T, E, K)
        assert k_per % BLOCK_K == 0 and splits * k_per >= K > (splits - 1) * k_per
        assert 16 <= block_m <= 64 and (block_m >= T or block_m == 64)
    assert split_plan(4, 256, 7168)[0] > 1  # a long K is split: many programs for few tokens


@pytest.mark.parametrize("shape", [MoEShape(h=96, h_ffn=8, n_expert=40, k_expert=6),
                                   DeaMoEShape(h=96, h_ffn=8, n_dept=4, n_expert=32, k_dept=2,
                                               k_expert=5)], ids=["topk", "group-limited"])
def test_routing_from_partials_equals_routing_from_logits(shape):
    # the routing kernel sums the partials on load: the same routing as from the summed logits
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, shape.h, generator=g)
    w = torch.randn(shape.n_expert, shape.h, generator=g) / shape.h ** 0.5
    parts = router_partials(x, w)  # h=96: one split; cut in two partials below
    stacked = torch.stack([parts[0] * 0.25, parts[0] * 0.75, *parts[1:]])
    ids, weights = route_kernel(shape, stacked)
    ref_ids, ref_w = route(shape, parts.sum(0))
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_w, rtol=1e-5, atol=1e-6)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"router_partials: x \(3, 8\) vs weight \(4, 9\)"):
        router_partials(torch.zeros(3, 8), torch.zeros(4, 9))
    with pytest.raises(ValueError, match="routing kernel: logits"):
        route_kernel(MoEShape(h=8, h_ffn=8, n_expert=32, k_expert=4), torch.zeros(2, 3, 5, 32))
