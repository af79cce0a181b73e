"""Figures 4/5 in FP8 (deamoe.report.fp8_panel): "not run" until an FP8 table exists; from one,
each row's speedup, ideal and roofline fractions beside the bf16 speedup and vLLM's FP8 time;
the bf16 vLLM table keeps only its own rows."""

from __future__ import annotations

import pandas as pd
import pytest

from deamoe.report import fp8_panel, tables

ROW = {"model": "DeepSeek-V3", "batch": 16, "baseline_us": 1000.0, "deamoe_us": 560.0,
       "ideal_speedup": 1.85, "baseline_frac_peak": 0.95, "deamoe_frac_peak": 0.9,
       "peak_read_tbps": 4.6, "gpu": "NVIDIA H200", "date": "2027-01-01T00:00:00Z",
       "git_sha": "abc"}


def test_not_run_without_an_fp8_table(results, tmp_path):
    art = fp8_panel.figure45_fp8(results, tmp_path / "nothing", "tiny")
    assert art.status != "ok" and (art.table["speedup"] == "not run").all()
    assert any(">= 0.95 of the ideal" in n for n in art.notes)
    fp8_panel.figure(art)  # a "not run" panel, no error


def test_fp8_rows_beside_bf16_and_vllm(results, measured):
    folder = measured / "h200"
    pd.DataFrame([{**ROW, "weight_dtype": p, "deamoe_us": us}
                  for p, us in (("fp8", 560.0), ("fp8-w8a8", 540.0))]).to_csv(
        folder / "microbench_fp8.csv", index=False)
    peer = {"model": "DeepSeek-V3", "batch": 16, "bytes": 4.5e9, "peak_read_tbps": 4.6,
            "tile": "x", "peer_rel_err": 0.03, "gpu": "NVIDIA H200", "date": "2026-12-05", "git_sha": "a"}
    rows = [{**peer, "variant": v, "us": us} for v, us in
            (("ours logits", 2010.0), ("ours routed", 2000.0), ("vllm routed", 2050.0))]
    rows += [{**peer, "variant": v, "us": us, "weight_dtype": "fp8-w8a8",
              "vllm_path": "fused_moe fp8_w8a8 block"} for v, us in
             (("ours logits", 1010.0), ("ours routed", 1000.0), ("vllm routed", 1100.0))]
    pd.DataFrame(rows).to_csv(folder / "vllm_peer.csv", index=False)
    art = fp8_panel.figure45_fp8(results, measured / "h200", "tiny")
    fp8_source = next(s for s in art.sources if s.path.name == "microbench_fp8.csv")
    assert fp8_source.prov.model_size.endswith("random bf16 weights quantised to block-scaled FP8")
    t = art.table.set_index("weight_dtype")
    assert t.loc["fp8", "speedup"] == pytest.approx(1000 / 560)
    assert t.loc["fp8", "speedup / ideal"] == pytest.approx(1000 / 560 / 1.85)
    assert t.loc["fp8", "baseline % read roofline"] == pytest.approx(95.0)
    assert t.loc["fp8-w8a8", "ours routed speed vs vLLM FP8"] == pytest.approx(1.1)
    assert pd.isna(t.loc["fp8"].get("vLLM FP8 routed_us"))  # no peer row of that precision
    bf16 = pd.read_csv(folder / "microbench.csv").set_index(["model", "batch"]).loc[
        ("DeepSeek-V3", 16)]
    assert t.loc["fp8", "bf16 speedup"] == pytest.approx(bf16.baseline_us / bf16.deamoe_us)
    fig = fp8_panel.figure(art)
    shown = {ax.get_title(): ax for ax in fig.axes}
    assert shown["DeepSeek-V3"].lines  # the measured model's curves
    empty = shown["Qwen3-235B-A22B"]  # a model the table has no rows of says so, no stray legend
    assert not [ln for ln in empty.lines if not ln.get_label().startswith("_")]
    assert empty.get_legend() is None
    assert any("not measured in FP8" in t.get_text() for t in empty.texts)
    peer_table = tables.vllm_peer(results, measured / "h200", "tiny").table
    assert len(peer_table) == 1 and peer_table["vLLM routed_us"].iloc[0] == 2050.0


def test_figure2_notes_the_fp8_bytes(results):
    from deamoe.analysis.loading import loading_table

    loading_table(["DeepSeek-V3"], [4, 64], trials=4).to_csv(
        results / "analysis" / "loading.csv", index=False)
    notes = " ".join(tables.figure2(results, "tiny").notes)
    assert "in FP8 (e4m3 values and a float32 scale per 128 x 128 block" in notes
    assert "FP8 bytes 0.50" in notes


def test_other_chips_fp8_tables_follow_as_rows_naming_their_chip(results, measured):
    # a committed FP8 table of another GPU (a sibling folder: h100/) adds its rows, each naming
    # its chip, with the vLLM rows of its own folder and no bf16 speedup (another chip's table)
    pd.DataFrame([{**ROW, "weight_dtype": "fp8-w8a8"}]).to_csv(
        measured / "h200" / "microbench_fp8.csv", index=False)
    other = measured / "h100"
    other.mkdir()
    pd.DataFrame([{**ROW, "weight_dtype": "fp8-w8a8", "deamoe_us": 520.0,
                   "gpu": "NVIDIA H100 80GB HBM3"}]).to_csv(other / "microbench_fp8.csv",
                                                           index=False)
    peer = {"model": "DeepSeek-V3", "batch": 16, "bytes": 4.5e9, "peak_read_tbps": 3.2,
            "tile": "x", "peer_rel_err": 0.03, "gpu": "NVIDIA H100 80GB HBM3",
            "date": "2026-12-06", "git_sha": "a", "weight_dtype": "fp8-w8a8",
            "vllm_path": "fused_moe fp8_w8a8 block"}
    pd.DataFrame([{**peer, "variant": v, "us": us} for v, us in
                  (("ours routed", 1000.0), ("vllm routed", 1250.0))]).to_csv(
        other / "vllm_peer.csv", index=False)
    art = fp8_panel.figure45_fp8(results, measured / "h200", "tiny")
    t = art.table.set_index("chip")
    assert list(t.index) == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    from deamoe.report.build import _shown
    assert "chip" in _shown(art).columns  # the report's table tells the two chips' rows apart
    h100 = t.loc["NVIDIA H100 80GB HBM3"]
    assert h100["speedup"] == pytest.approx(1000 / 520)
    assert h100["ours routed speed vs vLLM FP8"] == pytest.approx(1.25)
    assert pd.isna(h100["bf16 speedup"]) and not pd.isna(t.loc["NVIDIA H200", "bf16 speedup"])
    assert pd.isna(t.loc["NVIDIA H200"].get("vLLM FP8 routed_us"))  # none in h200/'s peer table
    assert any(str(other / "microbench_fp8.csv") in n for n in art.notes)
    shown = {ax.get_title(): ax for ax in fp8_panel.figure(art).axes}
    labels = [ln.get_label() for ln in shown["DeepSeek-V3"].lines]
    assert any(lb.endswith("NVIDIA H100 80GB HBM3") for lb in labels)
    # a sibling folder's table that is no FP8 table is a clear error, not a silent skip
    pd.DataFrame([{"model": "DeepSeek-V3"}]).to_csv(other / "microbench_fp8.csv", index=False)
    with pytest.raises(Exception, match="microbench_fp8.csv"):
        fp8_panel.figure45_fp8(results, measured / "h200", "tiny")


def test_other_chips_without_a_gpu_column_or_linked_to_this_one(results, measured):
    # a sibling table without a gpu column is named by its folder; a sibling that is a link to
    # the committed folder itself (latest -> h200) is that folder, not another chip's rows
    pd.DataFrame([{**ROW, "weight_dtype": "fp8"}]).to_csv(measured / "h200" / "microbench_fp8.csv",
                                                          index=False)
    (measured / "h100").mkdir()
    no_gpu = {k: v for k, v in ROW.items() if k != "gpu"}
    pd.DataFrame([{**no_gpu, "weight_dtype": "fp8"}]).to_csv(measured / "h100" / "microbench_fp8.csv",
                                                             index=False)
    (measured / "latest").symlink_to("h200")
    art = fp8_panel.figure45_fp8(results, measured / "h200", "tiny")
    assert list(art.table["chip"]) == ["NVIDIA H200", "h100"]
    assert any(n.startswith("rows of h100 from the committed") for n in art.notes)
    shown = {ax.get_title(): ax for ax in fp8_panel.figure(art).axes}
    assert any(ln.get_label().endswith(", h100") for ln in shown["DeepSeek-V3"].lines)


@pytest.mark.parametrize("name, target, why", [
    ("microbench_fp8.csv", "microbench_fp8.csv", "a link that leads back to itself"),
    ("vllm_peer.csv", "moved.csv", "a link to moved.csv, which does not exist"),
])
def test_another_chips_table_that_is_a_broken_link_is_named(results, measured, name, target, why):
    # a link loop or a link to nothing at a table's name is a table meant to be there, not a
    # stage that did not run: skipping it would drop that chip's rows without a word
    from deamoe.errors import DataError

    other = measured / "h100"
    other.mkdir()
    for folder in (measured / "h200", other):
        pd.DataFrame([{**ROW, "weight_dtype": "fp8"}]).to_csv(folder / "microbench_fp8.csv", index=False)
    (other / name).unlink(missing_ok=True)
    (other / name).symlink_to(target)
    with pytest.raises(DataError, match=f"{other / name}: {why}"):
        fp8_panel.figure45_fp8(results, measured / "h200", "tiny")


def test_vllm_rows_come_from_the_peer_table_beside_the_fp8_table(results, measured):
    # the committed FP8 table (this run measured none) beside this run's FP8 peer rows, of
    # another GPU: vLLM's times are shown only beside rows of the same run and GPU
    pd.DataFrame([{**ROW, "weight_dtype": "fp8"}]).to_csv(measured / "h200" / "microbench_fp8.csv",
                                                          index=False)
    peer = {"model": "DeepSeek-V3", "batch": 16, "bytes": 4.5e9, "peak_read_tbps": 3.2,
            "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06", "git_sha": "a",
            "weight_dtype": "fp8"}
    pd.DataFrame([{**peer, "variant": v, "us": us} for v, us in
                  (("ours routed", 1000.0), ("vllm routed", 1250.0))]).to_csv(
        results / "microbench" / "vllm_peer.csv", index=False)
    art = fp8_panel.figure45_fp8(results, measured / "h200", "tiny")
    assert "vLLM FP8 routed_us" not in art.table


def test_other_chips_rows_stand_alone_where_the_committed_folder_has_no_fp8_table(results, tmp_path):
    # the folder the report reads (measured_gpu) has no FP8 table, a sibling has one: its rows
    # are shown, the missing table's reason noted; with neither, "not run"
    measured = tmp_path / "measured"
    (measured / "h200").mkdir(parents=True)
    (measured / "h100").mkdir()
    pd.DataFrame([{**ROW, "weight_dtype": "fp8-w8a8", "gpu": "NVIDIA H100 80GB HBM3"}]).to_csv(
        measured / "h100" / "microbench_fp8.csv", index=False)
    art = fp8_panel.figure45_fp8(results, measured / "h200", "tiny")
    assert art.status == "ok" and list(art.table["chip"]) == ["NVIDIA H100 80GB HBM3"]
    assert any("no committed" in n and "h200/microbench_fp8.csv" in n for n in art.notes)
    fp8_panel.figure(art)
    (measured / "h100" / "microbench_fp8.csv").unlink()
    assert fp8_panel.figure45_fp8(results, measured / "h200", "tiny").status != "ok"


def test_vllm_rows_timed_beside_other_baseline_tiles_are_left_out_and_named(results, measured):
    # the FP8 table searched again after the peer run: where the peer's "ours" ran other tiles
    # than the table's baseline pick, its time is not this table's baseline beside vLLM
    folder = measured / "h200"
    pd.DataFrame([{**ROW, "weight_dtype": "fp8-w8a8", "batch": b, "baseline_tile": tile}
                  for b, tile in ((4, "w13=new"), (16, "w13=same"))]).to_csv(
        folder / "microbench_fp8.csv", index=False)
    peer = {"model": "DeepSeek-V3", "bytes": 4.5e9, "peak_read_tbps": 4.6, "gpu": "NVIDIA H200",
            "date": "2026-12-04T21:16:10Z", "git_sha": "715532fcd919", "weight_dtype": "fp8-w8a8"}
    rows = []
    for batch, tile in ((4, "w13=old"), (16, "w13=same")):
        rows += [{**peer, "batch": batch, "variant": "ours routed", "us": 900.0, "tile": tile},
                 {**peer, "batch": batch, "variant": "vllm routed", "us": 990.0,
                  "tile": "m16-n64-k128-g1-w4-s4"}]
    pd.DataFrame(rows).to_csv(folder / "vllm_peer.csv", index=False)
    art = fp8_panel.figure45_fp8(results, folder, "tiny")
    t = art.table.set_index("batch")
    assert pd.isna(t.loc[4, "vLLM FP8 routed_us"])
    assert t.loc[16, "ours routed speed vs vLLM FP8"] == pytest.approx(1.1)
    note = next(n for n in art.notes if n.startswith("vLLM FP8 not shown"))
    assert "DeepSeek-V3 fp8-w8a8 @4:" in note and "@16" not in note
    assert "git 715532f, 2026-12-04" in note


@pytest.mark.parametrize("chip", ["h200", "h100"])  # the committed folder's table, another chip's
def test_a_row_of_another_precision_in_an_fp8_table_is_named_with_its_line(results, measured, chip):
    """A row whose weight_dtype is no FP8 precision (bf16, int4, a typo) was shown in the FP8
    table, its vLLM columns empty; `bench import` refused the same table."""
    from deamoe.errors import DataError

    (measured / chip).mkdir(exist_ok=True)
    pd.DataFrame([{**ROW, "weight_dtype": p} for p in ("fp8-w8a8", "int4")]).to_csv(
        measured / chip / "microbench_fp8.csv", index=False)
    with pytest.raises(DataError, match=rf"{chip}/microbench_fp8.csv:3: column weight_dtype is 'int4', "
                                        r"not one of fp8, fp8-w8a8"):
        fp8_panel.figure45_fp8(results, measured / "h200", "tiny")
