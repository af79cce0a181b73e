import pandas as pd
import pytest

from deamoe.analysis.budget import budget, ffn_flops, ffn_params, search
from deamoe.analysis.loading import loading_table
from deamoe.analysis.table1 import table1
from deamoe.shapes import MODEL_NAMES, TABLE1, DeaMoEShape, MoEShape


def test_budget_counts_by_hand_baseline_7b():
    r = TABLE1["Baseline-7B"]
    assert ffn_params(r.baseline) == 256 * 3 * 1024 * 384 + 1024 * 256
    assert ffn_params(r.deamoe) == 8 * 3 * 1024 * 384 + 672 * 3 * 384 * 384 + 1024 * 672
    assert ffn_flops(r.baseline) == 2 * (8 * 3 * 1024 * 384 + 1024 * 256)
    assert ffn_flops(r.deamoe) == 2 * (4 * 3 * 1024 * 384 + 10 * 3 * 384 * 384 + 1024 * 672)


@pytest.mark.parametrize("model", [m for m in MODEL_NAMES if m != "DeepSeek-V2"])
def test_table1_ratios_match_paper(model):
    r = TABLE1[model]
    b = budget(r.baseline, r.deamoe)
    assert round(b["flops_ratio"], 3) == r.paper_flops_ratio
    assert round(b["params_ratio"], 3) == r.paper_params_ratio


def test_deepseek_v2_disagreement_is_reported_with_cause():
    df = table1(["DeepSeek-V2"])
    row = df.iloc[0]
    assert row.params_agrees and not row.flops_agrees
    assert row.flops_ratio == pytest.approx(1.3441, abs=1e-4)
    assert "k_expert=8" in row.note and "shared" in row.note


def test_search_returns_budget_matched_configurations():
    base = TABLE1["Baseline-7B"].baseline
    found = search(base)
    assert found
    for c in found:
        assert abs(c["flops_ratio"] - 1) <= 0.02 and abs(c["params_ratio"] - 1) <= 0.02
    assert found[0]["loading_ratio"] <= min(c["loading_ratio"] for c in found)


def test_budget_rejects_mismatched_hidden_sizes():
    with pytest.raises(ValueError, match="h_ffn"):
        budget(MoEShape(h=8, h_ffn=4, n_expert=4, k_expert=2),
               DeaMoEShape(h=8, h_ffn=8, n_dept=2, n_expert=4, k_dept=1, k_expert=2))


def test_loading_ratio_in_papers_range_for_deepseek_v3():
    df = loading_table(["DeepSeek-V3"], [4, 8, 16, 32, 64], trials=32, seed=0)
    # Paper: between 49.1% and 62.8% for 4..64 tokens (Monte Carlo noise ~0.3%).
    assert df.ratio.min() == pytest.approx(0.491, abs=0.012)
    assert df.ratio.max() == pytest.approx(0.628, abs=0.012)
    assert ((df.ratio > 0.47) & (df.ratio < 0.64)).all()
    closed = df.baseline_distinct_experts_closed_form
    assert ((df.baseline_distinct_experts - closed).abs() / closed < 0.03).all()


def test_loading_is_non_monotonic_and_tends_to_one():
    df = loading_table(["Qwen3-235B-A22B"], [1, 8, 512], trials=16, seed=1)
    r = df.set_index("tokens").ratio
    assert r[8] < r[1] and r[8] < r[512] and r[512] == pytest.approx(1.0, abs=0.01)


def test_fp8_loaded_bytes_are_the_e4m3_values_and_their_block_scales():
    from deamoe.analysis.budget import loaded_expert_bytes, shared_bytes
    from deamoe.kernels.fp8 import Fp8Format
    from deamoe.shapes import PRESETS

    row = PRESETS["DeepSeek-V3"]
    fmt = Fp8Format()
    # a DeepSeek-V3 expert: 3 matrices of 2048 x 7168, 16 x 56 blocks each (the paper's "about
    # 44 MB of FP8 weights" per expert)
    expert = 3 * (2048 * 7168 + 4 * 16 * 56)
    assert loaded_expert_bytes(row.baseline, 1, 0, fmt) == expert
    assert 44.0e6 < expert < 44.1e6
    assert loaded_expert_bytes(row.baseline, 1) == 2 * 3 * 2048 * 7168
    private = 3 * (2048 * 2048 + 4 * 16 * 16)
    assert loaded_expert_bytes(row.deamoe, 10, 5, fmt) == 5 * expert + 10 * private
    assert shared_bytes(row.baseline, fmt) == 0
    shared = PRESETS["DeepSeek-V3+shared"].baseline
    assert shared_bytes(shared, fmt) == 3 * (2048 * 7168 + 4 * 16 * 56)
    df = loading_table(["DeepSeek-V3"], [4, 64], trials=8, seed=0)
    # the same routings: FP8 bytes a little over half the bf16 bytes, the ratio within 1e-3
    assert ((df.baseline_bytes_fp8 / df.baseline_bytes) - 0.5).between(0, 0.001).all()
    assert (df.ratio_fp8 - df.ratio).abs().max() < 1e-3


def test_deamoe_flops_count_at_most_one_department_per_picked_expert():
    # soft routing allows k_expert < k_dept; a token then computes in k_expert departments at most
    few = DeaMoEShape(h=8, h_ffn=4, n_dept=4, n_expert=8, k_dept=3, k_expert=2)
    even = few.replace(k_dept=2)
    assert ffn_flops(few) == ffn_flops(even) == 2 * (2 * 3 * 8 * 4 + 2 * 3 * 4 * 4 + 8 * 8)
    assert ffn_flops(few.replace(k_expert=3)) > ffn_flops(even)
