"""Shared experts beside both decode layers (Triton interpreter on the CPU, float32): the layer
with its shared experts equals reference_forward (routed reference + dense SwiGLU FFN)."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.battery import Case, build_layer, check_case, shared_shapes
from deamoe.kernels.tile_config import TileConfig
from deamoe.kernels.shared_expert import SharedTiles, shared_layer

SHAPES = shared_shapes()


# (every routing pattern against the reference: test_kernels.test_layer_matches_reference)
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_side_stream_and_other_tiles_give_the_same_layer(name):
    # block_m 32 over 37 tokens (a partial block), tma and swapped tiles on the two GEMMs
    t = TileConfig.parse("n32-k32-w4-s2-tma-swap")
    for tiles in (SharedTiles(stream=True), SharedTiles(block_m=32, w13=t, w2=t)):
        row = check_case(Case(name, SHAPES[name], 37, "random", seed=4), shared_tiles=tiles)
        assert row["ok"], (tiles, row)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shared_layer_runs_a_model_layer_and_its_shared_experts_count(name):
    from deamoe.kernels.deamoe_decode import deamoe_layer
    from deamoe.kernels.fused_moe import fused_moe_layer
    from deamoe.model.layers import reference_forward
    from deamoe.routing import route

    shape = SHAPES[name]
    layer = build_layer(shape, "cpu", seed=3)
    x = torch.randn(2, 3, shape.h, generator=torch.Generator().manual_seed(5))
    ids, w = route(shape, layer.router(x.reshape(-1, shape.h)))
    run = deamoe_layer if shape.kind == "deamoe" else fused_moe_layer
    with torch.no_grad():
        out = shared_layer(layer, x, lambda: run(layer, x, ids, w))
        ref = reference_forward(layer, x.reshape(-1, shape.h), ids, w).reshape(x.shape)
        routed = run(layer, x, ids, w)
    assert out.shape == x.shape
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert (routed - ref).abs().max() > 1e-2  # the shared experts are not negligible here


def test_bf16_output_without_atomics_sums_through_fp32():
    # bf16 under the interpreter (no bf16 atomics): the shared sum goes through an fp32 buffer
    row = check_case(Case("moe-shared", SHAPES["moe-shared"], 9, "random", seed=6),
                     dtype=torch.bfloat16)
    assert row["finite"] and row["rel_err"] < 1e-2, row
