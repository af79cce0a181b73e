"""bench train on the CPU at small shapes: every section yields its rows with sane figures."""

from __future__ import annotations

import pytest

from deamoe.bench.train_bench import PARTS, choices, kernel_rows, layer_rows, step_rows
from deamoe.bench.train_kernels import category
from deamoe.errors import ConfigError
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.train import parallel
from deamoe.settings import load_settings


def _raise(what, exc):
    raise exc


def test_layer_rows_time_every_path():
    rows = []
    shapes = [("small", MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2)),
              ("small", DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=4))]
    layer_rows(shapes, 128, ["torch", "fast"], rows.append, _raise)
    assert [(r["ffn"], r["path"]) for r in rows] == [
        (f, p) for f in ("moe", "deamoe") for p in ("dense", "grouped_mm", "torch", "fast")]
    assert all(r["ms"] > 0 and r["tokens"] == 128 for r in rows)
    assert all(r["vs_dense"] == 1.0 for r in rows if r["path"] == "dense")


def test_step_rows_split_the_step_into_stages():
    settings = load_settings(doc={"train": {"seq_len": 16, "batch_size": 4, "micro_batch_size": 2, "threads": 1}})
    rows = []
    step_rows(settings, ["pretrain-tiny-deamoe-s0"], ["torch", "fast"], "step", 2, parallel.setup("cpu"), rows.append, _raise)
    assert [r["path"] for r in rows] == ["torch", "fast"]
    for r in rows:
        assert r["tokens"] == 64 and r["tokens_per_s"] > 0 and r["mfu"] is None
        assert r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["optimizer_ms"] > 0


def test_kernel_rows_break_each_path_down_by_operator():
    """On the CPU the rows are aten operators: each path's shares sum to one, and the DeaMoE fast
    path's sorts (its index math) and gathers show beside its GEMMs."""
    rows = []
    shapes = [("small", DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=4))]
    kernel_rows(shapes, 64, ["torch", "fast"], rows.append, _raise, reps=2)
    for path in ("torch", "fast"):
        mine = [r for r in rows if r["path"] == path]
        assert mine and abs(sum(r["share"] for r in mine) - 1) < 0.01
        assert all(r["ms"] > 0 and r["calls"] > 0 for r in mine)
        assert [r["ms"] for r in mine] == sorted((r["ms"] for r in mine), reverse=True)
    cats = {r["category"] for r in rows if r["path"] == "fast"}
    assert {"sort", "gather / scatter", "grouped GEMM"} <= cats, cats


@pytest.mark.parametrize("name, expected", [
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>", "grouped GEMM"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "grouped GEMM"),
    ("_mix_kernel", "Triton mix_rows"), ("_gather_sum_kernel", "Triton gather_sum"),
    ("triton_poi_fused__to_copy_mul_silu_0", "fused element-wise (inductor)"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>",
     "gather / scatter"),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<...>", "sort"),
    ("aten::argsort", "sort"), ("something_else", "other")])
def test_kernel_names_fall_into_their_category(name, expected):
    assert category(name) == expected


def test_unknown_parts_and_paths_are_refused_by_name():
    assert choices("--parts", ["layer", "kernels"], PARTS) == ["layer", "kernels"]
    with pytest.raises(ConfigError, match=r"--parts: 'steps' is not one of"):
        choices("--parts", ["layer", "steps"], PARTS)
    with pytest.raises(ConfigError, match=r"--paths: '' is not one of"):
        choices("--paths", [""], ("torch",))
