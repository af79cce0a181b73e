"""The microbenchmark keeps every finished point: written as it finishes (atomically), read back
by a re-run on the same folder, which measures only the points it lacks; points measured with
other settings are refused, naming the setting.  The search skips knob sets whose shared memory
exceeds the device's before compiling them."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.bench import microbench
from deamoe.bench.points import POINTS_FILE, PointStore
from deamoe.bench.settings import MicrobenchSettings
from deamoe.errors import ConfigError, DataError
from deamoe.shapes import DeaMoEShape, MoEShape

S = MicrobenchSettings(models=["Baseline-7B", "DeepSeek-V3"], batches=[4, 16],
                       torch_reference=False)
PROV = {"peak_read_tbps": 4.0, "routing": "eager route", "gpu": "cpu", "torch": "t",
        "triton": "x", "date": "2026-12-05", "git_sha": "s"}


class Killed(Exception):
    """Stands for the time limit's kill."""


def fake_bench_impl(calls: list, kill_after: int | None = None):
    """bench_impl without kernels: each point's row at once (us from the batch), recording the
    (layer kind, batch) points it was asked for; raises Killed after `kill_after` points."""
    def run(shape, batches, s, device="cuda", impl="triton", on_point=None, prior=None,
            fp8=None):
        rows = []
        for b in batches:
            if kill_after is not None and len(calls) == kill_after:
                raise Killed
            calls.append((shape.kind, b) if fp8 is None else (shape.kind, b, fp8.precision))
            row = {"batch": b, "us": (100.0 + b + (shape.kind == "deamoe") * -50) / (1 + bool(fp8)),
                   "bytes": (4.0e8 if shape.kind == "moe" else 2.0e8) / (1 + bool(fp8)),
                   "tile": f"{shape.kind}-knobs",
                   "experts": 3.0, "copies": 2, "layers": 8, "shared_stream": None,
                   "from_logits_us": math.nan}
            rows.append(row)
            on_point(row, [{"kind": shape.kind, "batch": b, "stage": "w13", "us": 1.0}]
                     if b == 4 else [])
        return rows
    return run


def test_a_killed_run_keeps_its_points_and_a_rerun_measures_only_the_rest(tmp_path, monkeypatch,
                                                                         capsys):
    calls: list = []
    monkeypatch.setattr(microbench, "bench_impl", fake_bench_impl(calls, kill_after=5))
    with pytest.raises(Killed):
        microbench.run_microbench(S, 4.0, device="cpu", store=PointStore.open(tmp_path, S))
    # the five finished points are on disk, and the two (model, batch) pairs they complete
    points = pd.read_csv(tmp_path / POINTS_FILE)
    assert len(points) == 5 and set(points.layer) == {"baseline", "deamoe"}
    table = pd.read_csv(tmp_path / "microbench.csv")
    assert table[["model", "batch"]].values.tolist() == [["Baseline-7B", 4], ["Baseline-7B", 16]]
    assert table.speedup.tolist() == pytest.approx([104 / 54, 116 / 66])
    # no temporary left behind (.deamoe-output names the folder's outputs: deamoe.io)
    assert [p.name for p in tmp_path.glob(".*")] in ([], [".deamoe-output"])
    lines = [x for x in capsys.readouterr().out.splitlines() if "batch" in x]
    assert lines[0].startswith("Baseline-7B baseline batch 4: best 104.0 us, ")
    assert "of the read roofline" in lines[0] and "[1/8 points" in lines[0]
    assert "speedup 1.926 = 0.963 of ideal" in lines[2]  # 104/54 over the bytes' ratio 2

    calls.clear()
    monkeypatch.setattr(microbench, "bench_impl", fake_bench_impl(calls))
    rows = microbench.run_microbench(S, 4.0, device="cpu", store=PointStore.open(tmp_path, S))
    assert calls == [("moe", 16), ("deamoe", 4), ("deamoe", 16)]  # DeepSeek-V3's three left
    assert [(r["model"], r["batch"]) for r in rows] == [
        ("Baseline-7B", 4), ("Baseline-7B", 16), ("DeepSeek-V3", 4), ("DeepSeek-V3", 16)]
    assert "5 of 8 points measured before" in capsys.readouterr().out
    assert len(pd.read_csv(tmp_path / "microbench.csv")) == 4
    assert len(pd.read_csv(tmp_path / "stages.csv")) == 4  # each layer's batch-4 breakdown
    calls.clear()  # a third run has nothing left to measure
    again = microbench.run_microbench(S, 4.0, "cpu", PointStore.open(tmp_path, S))
    pd.testing.assert_frame_equal(pd.DataFrame(again), pd.DataFrame(rows), check_dtype=False)
    assert calls == []


def test_points_of_other_settings_are_refused_naming_the_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(microbench, "bench_impl", fake_bench_impl([]))
    microbench.run_microbench(S, 4.0, device="cpu", store=PointStore.open(tmp_path, S))
    # which points run is no measurement setting: fewer models or other batches resume
    PointStore.open(tmp_path, dataclasses.replace(S, models=["DeepSeek-V3"], batches=[8]))
    other = dataclasses.replace(S, replays=20)
    with pytest.raises(ConfigError, match=r"microbench_points.csv: 8 of its 8 points .*"
                       r"microbench.replays: 50 then, 20 now.*delete it"):
        PointStore.open(tmp_path, other)
    (tmp_path / POINTS_FILE).write_text("model,batch\nx,1\n")
    with pytest.raises(DataError, match="not a microbench points table"):
        PointStore.open(tmp_path, S)


@pytest.mark.parametrize("stages", ["model,batch\nx,1\n", "model,kind,batch\nBaseline-7B,moe,four\n", ""])
def test_a_malformed_stages_table_is_named(tmp_path, monkeypatch, stages):
    """stages.csv beside the points is read back as they are: a missing column or a batch that
    is no number is a DataError naming it (they failed with a KeyError / ValueError)."""
    monkeypatch.setattr(microbench, "bench_impl", fake_bench_impl([]))
    microbench.run_microbench(S, 4.0, device="cpu", store=PointStore.open(tmp_path, S))
    (tmp_path / "stages.csv").write_text(stages)
    with pytest.raises(DataError, match=r"stages.csv: not a microbench stages table .*delete it"):
        PointStore.open(tmp_path, S)


def test_a_points_table_read_back_gives_the_same_rows(tmp_path):
    store = PointStore.open(tmp_path, S)
    for layer, stream in (("baseline", True), ("deamoe", None)):
        store.add({"model": "DeepSeek-V3+shared", "layer": layer, "batch": 4, "us": 10.0,
                   "bytes": 1e6, "tile": "k", "experts": 1.0, "copies": 1, "layers": 8,
                   "shared_stream": stream, **PROV}, [])
    again = PointStore.open(tmp_path, S)
    pd.testing.assert_frame_equal(pd.DataFrame(again.table()), pd.DataFrame(store.table()),
                                  check_dtype=False)
    assert again.table()[0]["baseline_shared_stream"] is True
    assert again.table()[0]["deamoe_shared_stream"] is None


@pytest.mark.parametrize("shape", [MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4),
                                   DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2,
                                               k_expert=5)], ids=["moe", "deamoe"])
def test_the_search_skips_knob_sets_over_the_shared_memory_uncompiled(shape, monkeypatch):
    from deamoe.decode.knobs import GEMM_STAGES, make_tiles, parse_knobs

    # at 16 rows, by the estimate: 6144 B and 24576 B (GemmSpec.shared_memory; SwiGLU's GEMM)
    small, large = "n32-k32-w4-s1", "n32-k64-w4-s3"
    s = MicrobenchSettings(tiles=[large, small], select_replays=1, replays=1, rotate_bytes=1e9,
                           max_copies=1, min_layers_per_graph=1, coordinate_search=False,
                           stage_batches=[], routing_draws=1)
    ran = []
    real = microbench.layer_steps

    def spy(shape, weights, xs, tiles=None, *args, **kw):
        ran.append(tiles)
        return real(shape, weights, xs, tiles, *args, **kw)
    monkeypatch.setattr(microbench, "layer_steps", spy)
    monkeypatch.setattr(microbench, "shared_memory_limit", lambda device: 10000)
    (row,) = microbench.bench_impl(shape, [3], s, device="cpu")
    knobs = parse_knobs(row["tile"])
    gemms = GEMM_STAGES[shape.kind]
    assert all(knobs[g] == small for g in gemms)
    assert row["smem_skipped"] == 1 and row["us"] > 0
    assert make_tiles(shape, {k: large if k in gemms else v for k, v in knobs.items()}) not in ran
    assert all(t is not None and t.shared_memory() <= 10000 for t in ran)


def test_fp8_points_go_to_their_own_table_and_resume_alike(tmp_path, monkeypatch, capsys):
    # microbench.weight_dtype: the FP8 layers' points beside the bf16 ones, their pairs in
    # microbench_fp8.csv (weight_dtype column), each DeaMoE point against its own precision's
    # baseline; which precisions run is no measurement setting
    calls: list = []
    monkeypatch.setattr(microbench, "bench_impl", fake_bench_impl(calls))
    s = dataclasses.replace(S, models=["DeepSeek-V3"], weight_dtype=["bf16", "fp8", "fp8-w8a8"])
    rows = microbench.run_microbench(s, 4.0, device="cpu", store=PointStore.open(tmp_path, s))
    assert [(r["model"], r["batch"]) for r in rows] == [("DeepSeek-V3", 4), ("DeepSeek-V3", 16)]
    assert ("moe", 4, "fp8-w8a8") in calls and len(calls) == 12
    fp8 = pd.read_csv(tmp_path / "microbench_fp8.csv")
    assert fp8[["weight_dtype", "batch"]].values.tolist() == [
        ["fp8", 4], ["fp8", 16], ["fp8-w8a8", 4], ["fp8-w8a8", 16]]
    assert fp8.speedup.tolist()[:2] == pytest.approx([104 / 54, 116 / 66])
    assert fp8.ideal_speedup.tolist() == pytest.approx([2.0] * 4) and fp8.vllm_h200_us.isna().all()
    assert "weight_dtype" not in pd.read_csv(tmp_path / "microbench.csv")
    assert set(pd.read_csv(tmp_path / POINTS_FILE).layer) == {
        "baseline", "deamoe", "baseline@fp8", "deamoe@fp8", "baseline@fp8-w8a8",
        "deamoe@fp8-w8a8"}
    out = capsys.readouterr().out
    assert "DeepSeek-V3 deamoe@fp8 batch 4: best 27.0 us" in out and "= 0.963 of ideal" in out
    calls.clear()
    again = PointStore.open(tmp_path, dataclasses.replace(s, weight_dtype=["fp8"]))
    assert len(again.fp8_table()) == 4 and len(again.stages) == 6  # each layer's batch-4 rows
    microbench.run_microbench(dataclasses.replace(s, weight_dtype=["fp8"]), 4.0, "cpu", again)
    assert calls == []


def test_bench_impl_times_an_fp8_layer_and_counts_its_bytes():
    from deamoe.decode.knobs import parse_knobs
    from deamoe.kernels.fp8 import Fp8Format

    shape = MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4)
    # a '-pq' tile among them: searched for w8a8 (its activations quantised before the GEMM)
    s = MicrobenchSettings(fp8_tiles=["n32-k32-w4-s1", "n32-k32-w4-s1-pq"], fp8_block=[32, 32],
                           select_replays=1,
                           replays=1, rotate_bytes=1e5, max_copies=1, min_layers_per_graph=1,
                           coordinate_search=False, stage_batches=[], routing_draws=1,
                           weight_dtype=["fp8-w8a8"])
    fmt = s.fp8_format("fp8-w8a8")
    (row,) = microbench.bench_impl(shape, [3], s, device="cpu", fp8=fmt)
    assert row["us"] > 0 and parse_knobs(row["tile"])["w13"].startswith("n32-k32-w4-s1")
    # the same routings as the bf16 layer (the router is drawn first, and stays bf16): the
    # FP8 step's bytes are its e4m3 values, their block scales and the bf16 router
    (bf16,) = microbench.bench_impl(shape, [3], dataclasses.replace(s, tiles=["n32-k32-w4-s1"]),
                                    device="cpu")
    assert bf16["experts"] == row["experts"]
    router = 2 * 16 * 64
    assert (row["bytes"] - router) / (bf16["bytes"] - router) == pytest.approx(
        (32 * 64 + 4 * 2) / (2 * 32 * 64))
    assert Fp8Format(32, 32, "fp8") == fmt


def test_fp8_settings_are_checked_naming_the_key():
    with pytest.raises(ConfigError, match="microbench.weight_dtype"):
        MicrobenchSettings(weight_dtype=["fp16"])
    with pytest.raises(ConfigError, match="microbench.weight_dtype"):
        MicrobenchSettings(weight_dtype=[])
    with pytest.raises(ConfigError, match="microbench.fp8_block"):
        MicrobenchSettings(fp8_block=[128, 96])
    with pytest.raises(ConfigError, match="microbench.fp8_tiles: n64-k64-w4-s3: BLOCK_K 64 does "
                       "not fit fp8-w8a8"):
        MicrobenchSettings(weight_dtype=["fp8-w8a8"], fp8_tiles=["n64-k64-w4-s3"])
    MicrobenchSettings(weight_dtype=["fp8"], fp8_tiles=["n64-k64-w4-s3"])  # weight-only: fits
    assert MicrobenchSettings().fp8_format("fp8-w8a8").block_k == 128
    # '-pq' (activations quantised before the GEMM) is a w8a8 choice: not a bf16 tile, and
    # weight-only FP8 (no activation quantisation) does not search it
    # (likewise '-qo', the output stored quantised for the next GEMM)
    for tile in ("n64-k128-w4-s4-pq", "n128-k128-w4-s4-qo", "n64-k128-w4-s4-qs"):
        with pytest.raises(ConfigError, match=f"microbench.tiles: {tile}: '-pq' / '-qo' / '-qs'"):
            MicrobenchSettings(tiles=[tile])
    # a count no launch can take is named with its key, not found on the GPU
    with pytest.raises(ConfigError, match="microbench.tiles: tile n48-k128-w4-s4: block_n 48"):
        MicrobenchSettings(tiles=["n64-k128-w4-s4", "n48-k128-w4-s4"])
    s = MicrobenchSettings(weight_dtype=["fp8", "fp8-w8a8"],
                           fp8_tiles=["n64-k128-w4-s4", "n64-k128-w4-s4-pq", "n64-k128-w4-s4-pq-nf",
                                      "n128-k128-w4-s4-qo", "n64-k128-w4-s4-pq-qs"])
    assert s.tiles_for("fp8-w8a8") == ["n64-k128-w4-s4", "n64-k128-w4-s4-pq", "n64-k128-w4-s4-pq-nf",
                                       "n128-k128-w4-s4-qo", "n64-k128-w4-s4-pq-qs"]
    assert s.tiles_for("fp8") == ["n64-k128-w4-s4"]
