"""Shared experts in the analyses: budget = module parameter counts, the '<model>+shared' presets,
Table 1's readings, Figure 2's bytes, the command line; n_shared=0 leaves every output as it was."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from deamoe.analysis.budget import budget, expected_loaded_params, ffn_flops, ffn_params
from deamoe.analysis.loading import loading_table
from deamoe.analysis.table1 import table1
from deamoe.shapes import MODEL_NAMES, PRESETS, SHARED_EXPERTS, TABLE1, table1_row
from deamoe.model.layers import build_ffn

DATA = Path(__file__).parent / "data"  # written by the code before shared experts existed


def run(*args):
    return subprocess.run([sys.executable, "-m", "deamoe", *args], capture_output=True, text=True)


def test_presets_carry_the_real_models_shared_experts():
    assert SHARED_EXPERTS == {"DeepSeek-V3": 1, "DeepSeek-V2": 2, "Kimi-K2": 1}
    for model, n in SHARED_EXPERTS.items():
        row, paper = table1_row(model + "+shared"), TABLE1[model]
        assert row.baseline == paper.baseline.replace(n_shared=n)
        assert row.deamoe == paper.deamoe.replace(n_shared=n)
        assert row.baseline.shared_ffn == n * paper.baseline.h_ffn
        assert paper.baseline.n_shared == paper.deamoe.n_shared == 0  # the paper's rows as printed


@pytest.mark.parametrize("shape_of", ["baseline", "deamoe"])
def test_budget_with_shared_experts_equals_module_parameter_count(shape_of):
    # a scaled-down DeepSeek-V2+shared (2 shared experts) and a wider single shared expert
    for row in (PRESETS["DeepSeek-V2+shared"], PRESETS["Kimi-K2+shared"]):
        shape = getattr(row, shape_of)
        small = shape.replace(h=32, h_ffn=8)
        for s in (small, small.replace(shared_mult=3)):
            layer = build_ffn(s)
            assert sum(p.numel() for p in layer.parameters()) == ffn_params(s)
            shared = sum(p.numel() for p in layer.shared_experts.parameters())
            assert shared == 3 * s.h * s.n_shared * s.shared_mult * s.h_ffn
            assert ffn_flops(s) - ffn_flops(s.replace(n_shared=0)) == 2 * shared


def test_budget_cli_n_shared_counts_both_layers():
    args = ["budget", "--h", "5120", "--h-ffn", "1536", "--n-expert", "160", "--k-expert", "6",
            "--n-dept", "8", "--dea-n-expert", "512", "--k-dept", "5", "--dea-k-expert", "10"]
    plain, shared = (json.loads(run(*args, *extra).stdout) for extra in ([], ["--n-shared", "2"]))
    assert set(plain) == set(shared)
    s = 3 * 5120 * 1536
    for kind in ("baseline", "deamoe"):
        assert shared[f"{kind}_params"] == plain[f"{kind}_params"] + 2 * s
        assert shared[f"{kind}_flops"] == plain[f"{kind}_flops"] + 2 * 2 * s
    assert round(shared["flops_ratio"], 4) == 1.2584
    r = run(*args, "--n-shared", "-1")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--n-shared" in r.stderr


def test_table1_paper_rows_unchanged_and_v2_note_names_the_reading():
    df = table1(list(MODEL_NAMES) + ["DeepSeek-V2+shared"])
    old = pd.read_csv(DATA / "table1_main.csv")
    new = pd.read_csv(io.StringIO(df.iloc[:5].to_csv(index=False)))
    assert (new.n_shared == 0).all()
    keep = [c for c in old.columns if c != "note"]
    pd.testing.assert_frame_equal(new[keep], old[keep], check_exact=True)
    v2 = old.model == "DeepSeek-V2"
    assert list(new.note[~v2].fillna("")) == list(old.note[~v2].fillna(""))
    note = df.set_index("model").loc["DeepSeek-V2", "note"]
    # the paper's 1.010 is 2 shared experts in the baseline's FLOPs only (1.0095)
    assert "reproduced by: 2 shared expert(s) in the baseline's FLOPs only" in note
    assert "k_expert=8" in note and "both layers (row DeepSeek-V2+shared) 1.2584" in note
    shared = df.set_index("model").loc["DeepSeek-V2+shared"]
    assert shared.n_shared == 2 and shared.flops_ratio == 1.2584 and shared.params_ratio == 1.0103
    assert "with-shared reading" in shared.note


def test_loading_paper_rows_unchanged_and_shared_bytes_added():
    old = pd.read_csv(DATA / "loading_main.csv")
    new = loading_table(list(MODEL_NAMES), [1, 4, 64], trials=16, seed=0)
    new = pd.read_csv(io.StringIO(new.to_csv(index=False)))
    pd.testing.assert_frame_equal(new[old.columns], old, check_exact=True)  # + the FP8 columns
    # same seed, one model: the routed draws are the same, the shared bytes are added to both
    plain = loading_table(["DeepSeek-V2"], [1, 4], trials=16, seed=0)
    shared = loading_table(["DeepSeek-V2+shared"], [1, 4], trials=16, seed=0)
    bytes_ = 2 * 2 * 3 * 5120 * 1536
    for kind in ("baseline", "deamoe"):
        assert (shared[f"{kind}_bytes"] - plain[f"{kind}_bytes"]).abs().sub(bytes_).abs().max() < 1
    assert ((shared.ratio - 1).abs() < (plain.ratio - 1).abs()).all()  # pulled toward 1
    row = PRESETS["DeepSeek-V2+shared"]
    closed = expected_loaded_params(row.deamoe, 1) / expected_loaded_params(row.baseline, 1)
    assert shared.ratio.iloc[0] == pytest.approx(closed, rel=0.05)


def test_loading_cli_takes_shared_names(tmp_path):
    out = tmp_path / "l.csv"
    r = run("loading", "--models", "DeepSeek-V3+shared,Kimi-K2+shared", "--tokens", "4",
            "--trials", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert list(pd.read_csv(out).model) == ["DeepSeek-V3+shared", "Kimi-K2+shared"]
    r = run("loading", "--models", "Qwen3-235B-A22B+shared", "--out", str(out))
    assert r.returncode == 2 and "Qwen3-235B-A22B+shared" in r.stderr
