"""The microbenchmark with shared experts ("<model>+shared"): weights, bytes, the step against the
layer reference, both schedules timed and reported (CPU: interpreter kernels, host clock)."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.analysis.budget import shared_params
from deamoe.bench.layer_step import layer_bytes, library_step, step_bytes
from deamoe.bench.microbench import bench_impl
from deamoe.bench.settings import MicrobenchSettings
from deamoe.bench.shared import prior_for, shared_columns
from deamoe.decode.weights import layer_weights, random_weights
from deamoe.shapes import PRESETS, DeaMoEShape, MoEShape
from deamoe.errors import ConfigError
from deamoe.kernels.shared_expert import SharedTiles

MOE = MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4, n_shared=2)
DEA = DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5, n_shared=1)
TINY = MicrobenchSettings(tiles=["n32-k32-w4-s1"], select_replays=1, replays=1, rotate_bytes=1e9,
                          max_copies=1, coordinate_search=False,
                          stage_batches=[], min_layers_per_graph=1)


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_weights_and_bytes_include_the_shared_experts(shape):
    w = random_weights(shape, "cpu", torch.float32, seed=1)
    assert w["shared_gate"].shape == (shape.shared_ffn, shape.h)
    assert w["shared_down"].shape == (shape.h, shape.shared_ffn)
    assert layer_bytes(shape) == sum(2 * t.numel() for t in w.values())
    ids = torch.tensor([[0, 1, 4, 5, 6][: shape.k_expert]])
    plain = shape.replace(n_shared=0)
    assert step_bytes(shape, ids) - step_bytes(plain, ids) == 2 * shared_params(shape)


def test_library_step_with_shared_experts_equals_the_layer_reference():
    # the microbenchmark's library reference (torch._grouped_mm) of the baseline layer; the
    # Triton step with shared experts: tests/decode/test_step.py
    from deamoe.model.layers import build_ffn, reference_forward
    from deamoe.routing import route

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("no torch._grouped_mm")
    torch.manual_seed(2)
    layer = build_ffn(MOE, init_std=0.1)
    w = layer_weights(layer)
    with torch.no_grad():
        x = torch.randn(7, MOE.h, generator=torch.Generator().manual_seed(3))
        ids, weights = route(MOE, x @ w["router"].T)
        ref = reference_forward(layer, x, ids, weights)
        try:
            out = library_step(MOE, w, x)
        except RuntimeError as exc:  # torch._grouped_mm needs a GPU on some builds
            pytest.skip(str(exc)[:80])
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="baseline"):
        library_step(DEA, random_weights(DEA, "cpu", torch.float32), x)


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_bench_impl_times_both_shared_schedules_and_reports_one(shape, monkeypatch):
    seen = []
    real = SharedTiles

    def spy(**kw):  # the schedules the microbenchmark tries (the search's steps use the default)
        if "stream" in kw:
            seen.append(kw["stream"])
        return real(**kw)

    monkeypatch.setattr("deamoe.kernels.shared_expert.SharedTiles", spy)
    (row,) = bench_impl(shape, [3], TINY, device="cpu")
    assert row["us"] > 0 and row["shared_stream"] in (False, True)
    assert seen == [False, True]


def test_settings_and_columns():
    with pytest.raises(ConfigError, match="shared_stream"):
        MicrobenchSettings(shared_stream=[])
    MicrobenchSettings(models=["DeepSeek-V3+shared", "Kimi-K2+shared", "DeepSeek-V2+shared"])
    with pytest.raises(ConfigError, match="Qwen3-235B-A22B\\+shared"):
        MicrobenchSettings(models=["Qwen3-235B-A22B+shared"])
    row = PRESETS["DeepSeek-V2+shared"]
    assert shared_columns(row, {"shared_stream": True}, {"shared_stream": False}) == {
        "n_shared": 2, "baseline_shared_stream": True, "deamoe_shared_stream": False}
    assert shared_columns(PRESETS["DeepSeek-V2"], {}, {}) == {}


def test_shared_layers_start_from_the_routed_layers_picks(tmp_path):
    table = tmp_path / "mb.csv"
    table.write_text("model,batch,baseline_tile,deamoe_tile\n"
                     "DeepSeek-V3,4,w13=n128-k128-w4-s3;w2=n64-k64-w4-s3;block_m=16,failed\n")
    assert prior_for([str(table)], "DeepSeek-V3+shared", "baseline") == prior_for(
        [str(table)], "DeepSeek-V3", "baseline") != {}


def test_h200_shared_config_names_the_three_models_at_the_ten_batches(monkeypatch):
    from pathlib import Path

    from deamoe.report.shared_rows import MEASURE_COMMAND, SHARED_MODELS
    from deamoe.settings import load_section

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # its prior_picks path is relative to the repository root
    path = "workflow/profiles/gpu/microbench-shared.yaml"
    s = load_section(path, "microbench", MicrobenchSettings)
    assert sorted(s.models) == sorted(SHARED_MODELS)
    assert s.batches == [4, 8, 16, 24, 32, 40, 48, 64, 96, 128] and s.shared_stream == [False, True]
    assert path in MEASURE_COMMAND


def test_shared_schedules_follow_the_nearest_measured_batch():
    from deamoe.bench.shared import SharedSchedules, shared_schedules

    rows = [{"model": "m+shared", "batch": 4, "baseline_shared_stream": True,
             "deamoe_shared_stream": False},
            {"model": "m+shared", "batch": 16, "baseline_shared_stream": False,
             "deamoe_shared_stream": float("nan")},  # no DeaMoE pick at 16
            {"model": "m", "batch": 4}]  # a layer without shared experts: no column
    sched = shared_schedules(rows)
    assert sched == {("m+shared", "baseline"): {4: True, 16: False},
                     ("m+shared", "deamoe"): {4: False}}
    got = {b: SharedSchedules(sched, 32).tiles("m+shared", "baseline", b) for b in (5, 10, 12, 160)}
    assert {b: t.stream for b, t in got.items()} == {5: True, 10: True, 12: False, 160: False}
    assert got[5].block_m == 32
    assert SharedSchedules(sched).tiles("m", "baseline", 4) is None


def test_decode_runs_the_shared_experts_on_the_picked_schedule(monkeypatch):
    from deamoe.bench import decode
    from deamoe.bench.shared import SharedSchedules

    seen = []
    real = decode.ffn_step

    def spy(shape, w, x, **kw):
        seen.append((shape.kind, kw["shared"]))
        return real(shape, w, x, **kw)

    monkeypatch.setattr(decode, "ffn_step", spy)
    dec = decode.DecoderShape(n_layers=1, heads=4, context=8, vocab=50)
    rows = decode.run_decode(["m+shared"], [3], dec, replays=1, device="cpu",
                             shapes={"m+shared": (MOE, DEA)},
                             shared=SharedSchedules({("m+shared", "baseline"): {2: True}}, 32))
    assert {k: s for k, s in seen} == {"moe": SharedTiles(block_m=32, stream=True),
                                       "deamoe": None}  # none picked: ffn_step's in-line default
    prov = {"device": "cpu", "torch": "x", "date": "2026-12-05", "git_sha": "s"}
    (row,) = decode.tpot_table(rows, prov, dec)
    assert row["baseline_shared_stream"] is True and row["deamoe_shared_stream"] is False


def test_a_decoder_too_large_for_the_gpu_is_named_before_any_work():
    from deamoe.bench.decode import DecoderShape, RandomDecoder, check_decode_fits, decoder_bytes

    dec = DecoderShape(n_layers=2, heads=4, context=8, vocab=50)
    net = RandomDecoder(MOE, dec, max_batch=3, device="cpu", dtype=torch.bfloat16)
    held = [net.embed, net.lm_head] + [t for L in net.layers for t in
                                       [L["wqkv"], L["wo"], L["k"], L["v"], *L["ffn"].values()]]
    assert decoder_bytes(MOE, dec, 3) == sum(2 * t.numel() for t in held)
    h200 = DecoderShape(n_layers=24, heads=16, context=512, vocab=32000)
    check_decode_fits(["Baseline-7B"], [4, 256], h200, 141e9)
    with pytest.raises(ConfigError, match=r"microbench.decode_models: DeepSeek-V2\+shared: its "
                       r"decoder holds \d+\.\d GB \(24 layers, microbench.decode_layers\) > "
                       r"the GPU's 141.0 GB"):
        check_decode_fits(["Baseline-7B", "DeepSeek-V2+shared"], [4, 256], h200, 141e9)
