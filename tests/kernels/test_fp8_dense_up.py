"""The dense department up-projection through cuBLAS (deamoe.kernels.fp8_dense_up) on the CPU.

torch has no block-wise FP8 GEMM on the CPU, so `torch._scaled_mm` is stood in for by its
definition -- e4m3 operands times their block scales, summed in float32 -- which also insists
on the layouts cuBLAS reads (A row-major with its scales group by group, B column-major); the
rest of the layer (the quantiser, the grouped GEMMs reading the planar department output) runs
under Triton's interpreter.  On the GPU the battery's `bench fp8-check` runs the real one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels import fp8_dense_up
from deamoe.kernels.battery import Case, check_case, small_shapes, tolerance
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fp8 import Fp8Format, quantize
from deamoe.kernels.fp8_quant import quantize_groups
from deamoe.kernels.tile_config import TileConfig

W8A8 = Fp8Format(32, 32, "fp8")
TILE = TileConfig.parse("n32-k32-w4-s1")


def block_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                    use_fast_accum=False, *, out=None):
    """torch._scaled_mm with 1 x g activation groups and g x g weight blocks, by definition."""
    (m, k), n = a.shape, b.shape[1]
    assert a.stride(1) == 1 and b.stride(0) == 1, "cuBLAS: A row-major, B column-major"
    assert scale_a.stride(0) == 1, "cuBLAS: A's block scales group by group (outer-dim-major)"
    sa = scale_a.repeat_interleave(k // scale_a.shape[1], 1)
    sb = scale_b.repeat_interleave(k // scale_b.shape[0], 0).repeat_interleave(n // scale_b.shape[1], 1)
    got = ((a.float() * sa) @ (b.float() * sb)).to(out_dtype)
    return got if out is None else out.copy_(got)


@pytest.fixture
def cublas(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **kw: calls.append(1) or block_scaled_mm(*a, **kw))
    return calls


def tiles(**knobs) -> DeaMoETiles:
    return DeaMoETiles(dept_up=TILE, expert_up=TILE, expert_down=TILE, dept_down=TILE,
                       dense_dept_up=True, dense_up_cublas=True, **knobs)


def test_quantiser_stores_scales_group_by_group_with_the_same_values():
    x = torch.randn(5, 96) * torch.logspace(-2, 2, 96)
    q, s = quantize_groups(x, 32)
    qg, sg = quantize_groups(x, 32, by_group=True)
    assert sg.shape == (5, 3) and sg.stride() == (1, 5)
    assert torch.equal(sg, s) and torch.equal(qg.view(torch.uint8), q.view(torch.uint8))


@pytest.mark.parametrize("operator", ["silu", "gelu", "none"])
def test_the_stage_writes_both_halves_planar_with_the_operator(cublas, operator):
    from deamoe.model.layers import operator as layer_operator

    torch.manual_seed(0)
    n_dept, f, h, tokens = 3, 64, 96, 5
    gate, up = (quantize(torch.randn(n_dept, f, h) / 8, W8A8) for _ in range(2))
    x = torch.randn(tokens, h)
    a1 = fp8_dense_up.planar_rows(tokens, n_dept, f, x)
    fp8_dense_up.dense_dept_up(x, gate, up, a1, operator)
    q, s = quantize_groups(x, 32)
    xq = q.float() * s.repeat_interleave(32, 1)  # the activations as the GEMM sees them
    for half, w in zip(a1.view(2, tokens, n_dept, f), (gate, up)):
        want = layer_operator(operator)(torch.einsum("th,jfh->tjf", xq, w.dequantize()))
        torch.testing.assert_close(half, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("knobs", [{}, {"split_launches": 2}])
@pytest.mark.parametrize("preq", [False, True])
def test_the_layer_with_the_cublas_stage_matches_the_reference_and_the_tile_path(cublas, knobs, preq):
    shape = small_shapes()["deamoe-small"]
    made = tiles(**knobs)
    if preq:  # the expert up-projection quantises the planar output before its GEMM ('-pq')
        made = dataclasses.replace(made, expert_up=dataclasses.replace(TILE, preq=True))
    case = Case("deamoe-small", shape, 13, "random", seed=4)
    row = check_case(case, tiles=made, fp8=W8A8)
    assert len(cublas) == 2  # the gate and up halves, through "cuBLAS"
    assert row["ok"] and row["rel_err"] < tolerance("cpu", torch.float32, W8A8), row
    triton_row = check_case(case, tiles=dataclasses.replace(made, dense_up_cublas=False), fp8=W8A8)
    assert abs(row["rel_err"] - triton_row["rel_err"]) < 2e-3, (row, triton_row)


def test_refusals_name_what_does_not_fit(cublas):
    with pytest.raises(ValueError, match="needs dense_dept_up=1 and dense_parts=0"):
        DeaMoETiles(dense_up_cublas=True)
    with pytest.raises(ValueError, match="needs dense_dept_up=1 and dense_parts=0"):
        DeaMoETiles(dense_dept_up=True, dense_up_cublas=True, split_launches=2, dense_parts=1)
    with pytest.raises(ValueError, match="cuBLAS writes the department output whole"):
        DeaMoETiles(dense_dept_up=True, dense_up_cublas=True,
                    dept_up=TileConfig.parse("n32-k32-w4-s1-pq-qs"))
    assert "fused operator" in tiles().operator_misfit("rmsnorm")
    shape = small_shapes()["deamoe-small"]
    case = Case("deamoe-small", shape, 5, "random", seed=1)
    with pytest.raises(ValueError, match="block-scaled FP8 department weights"):
        check_case(case, tiles=tiles())  # bf16 weights
    with pytest.raises(ValueError, match="needs w8a8 weights"):
        check_case(case, tiles=tiles(), fp8=Fp8Format(32, 32))  # weight-only FP8
    x = torch.randn(2, 64)
    gate = quantize(torch.randn(4, 32, 64), W8A8)
    assert "128 x 128" not in (fp8_dense_up.misfit(x, gate, gate, "silu") or "")  # CPU: any block
    with pytest.raises(ValueError, match="not planar_rows"):
        fp8_dense_up.dense_dept_up(x, gate, gate, torch.empty(8, 64), "silu")


def test_the_search_keeps_the_cublas_stage_only_where_it_is_faster():
    from deamoe.bench.search import dense_up_cublas_pass
    from deamoe.bench.settings import MicrobenchSettings

    shape = small_shapes()["deamoe-small"]
    s = MicrobenchSettings()
    pick = {"dept_up": TILE.name, "expert_up": TILE.name, "expert_down": TILE.name,
            "dept_down": TILE.name, "dense_dept_up": 1}
    faster = lambda k: 90.0 if k.get("dense_up_cublas") else 100.0  # noqa: E731
    slower = lambda k: 110.0 if k.get("dense_up_cublas") else 100.0  # noqa: E731
    assert dense_up_cublas_pass(shape, pick, faster, s, qout=True) == {**pick, "dense_up_cublas": 1}
    assert dense_up_cublas_pass(shape, pick, slower, s, qout=True) == pick
    # not on weights whose activations stay bf16, nor on routed or part-dense picks, nor when off
    assert dense_up_cublas_pass(shape, pick, faster, s, qout=False) == pick
    assert dense_up_cublas_pass(shape, {**pick, "dense_dept_up": 0}, faster, s, qout=True)["dense_dept_up"] == 0
    parts = {**pick, "split_launches": 2, "dense_parts": 1}
    assert dense_up_cublas_pass(shape, parts, faster, s, qout=True) == parts
    off = dataclasses.replace(s, dense_up_cublas=False)
    assert dense_up_cublas_pass(shape, pick, faster, off, qout=True) == pick
    # a dept_up tile storing its output with its absmax cannot take it: not a candidate
    qs = {**pick, "dept_up": "n32-k32-w4-s1-pq-qs"}
    assert dense_up_cublas_pass(shape, qs, faster, s, qout=True) == qs
