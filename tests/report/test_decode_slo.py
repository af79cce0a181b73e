"""Figure 3 (right) at GPU scale from the decode-step table: budgets, sustained batches, gains."""

from __future__ import annotations

import math

import pandas as pd

from deamoe.report.decode_slo import decode_slo, slo_rows


def _table(batches, base, dea):
    return pd.DataFrame({"model": "Baseline-7B", "batch": batches,
                         "baseline_tpot_ms": base, "deamoe_tpot_ms": dea})


def test_budgets_are_the_baselines_tpot_and_deamoe_sides_are_marked():
    df = _table([8, 24, 32, 64, 96], [2.0, 3.0, 3.5, 5.0, 6.0], [2.1, 2.8, 3.2, 4.5, 5.5])
    rows = slo_rows(df).set_index("budget")
    r24 = rows.loc["baseline TPOT at batch 24"]
    assert r24["tpot_budget_ms"] == 3.0 and r24["baseline_batch"] == 24
    assert r24["deamoe_batch"] == 24 and r24["deamoe_next_batch"] == 32
    assert math.isclose(r24["deamoe_interp_batch"], 28.0)  # 24 + (3.0 - 2.8) / (3.2 - 2.8) * 8
    assert r24["deamoe_side"] == "measured"
    assert (r24["paper_baseline_batch"], r24["paper_deamoe_batch"], r24["paper_gain"]) == \
        (24, 44, 1.83)
    r64 = rows.loc["baseline TPOT at batch 64"]
    assert r64["deamoe_batch"] == 64 and r64["batch_gain"] == 1.0
    assert math.isclose(r64["interp_batch_gain"], (64 + 0.5 / 1.0 * 32) / 64)
    assert math.isclose(r64["throughput_gain"], (64 / 4.5) / (64 / 5.0))
    assert r64["paper_a40_budget_ms"] == 30
    # DeaMoE still within the budget at its largest batch: its side needs a larger batch
    r96 = rows.loc["baseline TPOT at batch 96"]
    assert r96["deamoe_side"] == "not measured: needs a batch above 96"
    assert math.isnan(rows.loc["baseline TPOT at batch 32", "paper_gain"])
    r8 = rows.loc["baseline TPOT at batch 8"]
    assert math.isnan(r8["deamoe_batch"]) and r8["deamoe_side"].startswith("measured: none")


def test_artifact_from_the_committed_table_or_not_run(tmp_path):
    from deamoe.report.artifact import NOT_RUN

    missing = decode_slo(tmp_path / "results", tmp_path / "measured", None)
    assert missing.status == NOT_RUN and (missing.table["reproduced"] == NOT_RUN).all()
    assert list(missing.table["paper_gain"]) == [1.50, 1.83]
    folder = tmp_path / "measured"
    folder.mkdir()
    _table([24, 64], [3.0, 5.0], [2.5, 4.0]).assign(gpu="NVIDIA H200").to_csv(
        folder / "decode_tpot.csv", index=False)
    art = decode_slo(tmp_path / "results", folder, None)
    assert art.status == "ok" and "not a vLLM server" in art.title and "H200" in art.title
    assert "committed" in art.notes[0]
    assert list(art.table["deamoe_batch"]) == [24, 64]
