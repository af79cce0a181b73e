"""The benchmark code paths at tiny shapes on the CPU (interpreter kernels, host-clock timing)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.bench.decode import DecoderShape, run_decode, tpot_table
from deamoe.bench.layer_step import layer_bytes, step_bytes
from deamoe.bench.microbench import bench_impl
from deamoe.bench.search import BLOCK_M_KNOBS
from deamoe.bench.settings import MicrobenchSettings
from deamoe.decode.knobs import GEMM_STAGES, parse_knobs
from deamoe.decode.step import ffn_step
from deamoe.decode.weights import random_weights
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.errors import ConfigError, DataError

MOE = MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4)
DEA = DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5)
# the layers the timing tests run step after step: an interpreted GEMM costs a program per routed
# group and BLOCK_N columns, so few experts a token (and 1-token batches) and wide tiles
MOE_2 = MoEShape(h=64, h_ffn=32, n_expert=6, k_expert=2)
DEA_2 = DeaMoEShape(h=64, h_ffn=32, n_dept=2, n_expert=6, k_dept=1, k_expert=2)
# interpreted kernels cost seconds per layer step: reported graphs of 4 steps (2 copies x 2 passes)
TINY = MicrobenchSettings(tiles=["n64-k32-w4-s1", "n32-k32-w4-s1"], select_replays=1, replays=1,
                          rotate_bytes=1e9, max_copies=2, min_layers_per_graph=4,
                          coordinate_search=False, stage_batches=[])
# the A/B timing tests, which assert no graph size: one layer step per timed call
ONE_STEP = dataclasses.replace(TINY, max_copies=1, min_layers_per_graph=1)


def test_step_bytes_counts_distinct_experts_and_departments():
    ids = torch.tensor([[0, 1, 4, 5, 6], [0, 2, 3, 8, 9]])  # depts (4 per dept): {0,1} and {0,2}
    f, h = DEA.h_ffn, DEA.h
    router = 2 * DEA.n_expert * h
    assert step_bytes(DEA, ids) == router + 3 * (2 * 3 * f * h) + 9 * (2 * 3 * f * f)
    assert step_bytes(MOE, ids[:, :4]) == 2 * MOE.n_expert * h + 7 * (2 * 3 * f * h)
    assert layer_bytes(MOE) == 2 * 16 * 64 + 16 * 2 * 3 * 32 * 64


@pytest.mark.parametrize("shape", [MOE_2, DEA_2], ids=["moe", "deamoe"])
def test_bench_impl_rows(shape, monkeypatch):
    import deamoe.bench.microbench as mb

    calls = []
    real = mb.time_fn

    def recording(fn, replays, per_call=1, graph=True, prepare=None):
        calls.append((per_call, prepare is not None))
        return real(fn, replays, per_call, graph, prepare)
    monkeypatch.setattr(mb, "time_fn", recording)
    rows = bench_impl(shape, [1], TINY, device="cpu")
    (row,) = rows
    knobs = parse_knobs(row["tile"])
    assert row["batch"] == 1 and row["us"] > 0
    assert set(knobs) - {"pair_dept_down"} == (set(GEMM_STAGES[shape.kind])
                                                | set(BLOCK_M_KNOBS[shape.kind]))
    assert all(knobs[st] in TINY.tiles for st in GEMM_STAGES[shape.kind])
    assert row["copies"] == 2 and row["bytes"] > 2 * shape.n_expert * shape.h
    # the reported time comes from a graph of >= min_layers_per_graph (4) layer steps
    assert row["layers"] == 4
    # the baseline is also timed from the router logits (the vLLM peer's input); DeaMoE not
    assert (row["from_logits_us"] > 0) if shape.kind == "moe" else math.isnan(row["from_logits_us"])
    if shape.kind == "deamoe":
        # the finalists are compared on the graph the reported time uses (>= 4 layer steps:
        # here 2 copies x 2), not on the trials' one pass over the copies: the two tiles' trials
        # on one pass over the 2 copies; both re-timed as finalists, then the reported time, on
        # 4 layer steps, then the pick with pair_dept_down (the pick itself timed once) on them;
        # every timing redraws the inputs per replay
        assert calls == [(2, True), (2, True), (4, True), (4, True), (4, True), (4, True)]


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_point_inputs_draw_each_step_and_count_the_mean_bytes(shape):
    # every layer step of the reported graph (2 copies x 2) has its own input in each of
    # routing_draws draws; bytes / experts are the mean over all those routings (step j on
    # copy j % 2), and prepare(i) puts draw i % draws into the inputs the graph reads
    from deamoe.bench.microbench import layer_copies, point_inputs
    from deamoe.routing import route

    s = dataclasses.replace(TINY, routing_draws=3)
    weights = layer_copies(shape, s, "cpu")
    inputs, nbytes, experts = point_inputs(shape, weights, 6, s, "cpu")
    assert len(inputs.live) == 4 and len(inputs.draws) == 3
    assert all(x.shape == (6, shape.h) for d in inputs.draws for x in d)
    ids = [route(shape, torch.nn.functional.linear(x, weights[j % 2]["router"]))[0]
           for d in inputs.draws for j, x in enumerate(d)]
    assert nbytes == pytest.approx(sum(step_bytes(shape, i) for i in ids) / 12)
    assert experts == pytest.approx(sum(torch.unique(i).numel() for i in ids) / 12)
    distinct = {tuple(torch.unique(i).tolist()) for i in ids}
    assert len(distinct) > 1  # the draws route differently
    assert all(torch.equal(a, b) for a, b in zip(inputs.live, inputs.draws[0]))
    inputs.prepare(4)  # cycles: draw 1
    assert all(torch.equal(a, b) for a, b in zip(inputs.live, inputs.draws[1]))


def test_step_inputs_map_rotates_with_its_source():
    # the time from the logits rotates the logits with the inputs: after prepare(i) of both,
    # each step's live logits are its live input's
    from deamoe.bench.layer_step import StepInputs

    draws = [[torch.full((2, 3), float(10 * d + j)) for j in range(4)] for d in range(3)]
    inputs = StepInputs([x.clone() for x in draws[0]], draws)
    doubled = inputs.map(lambda j, x: 2 * x + j)
    for i in (2, 1, 5):
        inputs.prepare(i)
        doubled.prepare(i)
        assert all(torch.equal(y, 2 * x + j)
                   for j, (x, y) in enumerate(zip(inputs.live, doubled.live)))
    with pytest.raises(ValueError, match="one tensor per live input"):
        StepInputs(draws[0], [draws[1][:3]])


def test_layer_steps_give_each_step_its_own_input(monkeypatch):
    # step j of the graph runs copy j % copies on xs[j % len(xs)]: per-copy inputs are reused
    # each pass, per-step inputs (StepInputs.live) are each used once
    from deamoe.bench import layer_step

    seen = []
    monkeypatch.setattr(layer_step, "ffn_step",
                        lambda shape, w, x, **kw: seen.append((w["id"], int(x[0]))))
    ws = [{"id": "w0"}, {"id": "w1"}]
    xs = [torch.tensor([i]) for i in range(4)]
    layer_step.layer_steps(MOE, ws, xs, repeat=2)()
    assert seen == [("w0", 0), ("w1", 1), ("w0", 2), ("w1", 3)]
    seen.clear()
    layer_step.layer_steps(MOE, ws, xs[:2], repeat=2)()
    assert seen == [("w0", 0), ("w1", 1), ("w0", 0), ("w1", 1)]
    with pytest.raises(ValueError, match="3 logits for 4 inputs"):
        layer_step.layer_steps(MOE, ws, xs, repeat=2, logits=xs[:3])


def test_time_fn_prepares_every_replay_before_it_runs():
    # CPU path: prepare(i) runs before replay i (not inside the timed span), replay i sees it
    from deamoe.bench.layer_step import time_fn

    state, log = {"i": None}, []
    timing = time_fn(lambda: log.append(state["i"]), 4,
                     prepare=lambda i: state.update(i=i))
    assert log == [None, 0, 1, 2, 3] and timing.replays == 4  # the first call warms up


def test_committed_points_yield_the_picked_knobs(tmp_path):
    # what the A/B tools re-time: each point's committed knobs, baseline layer first, inputs
    # and bytes from the same routing; the point list order is kept within a model
    import types

    from deamoe.bench.microbench import committed_points

    table = tmp_path / "microbench.csv"
    table.write_text("model,batch,baseline_tile,deamoe_tile\n"
                     "tiny,2,w13=n32-k32-w4-s1;w2=n16-k32-w4-s1;block_m=16,"
                     "dept_up=n16-k32-w4-s1;expert_up=n16-k32-w4-s1;expert_down=n16-k32-w4-s1;"
                     "dept_down=n16-k32-w4-s1;dept_block_m=16;expert_block_m=16;dense_dept_up=1\n"
                     "tiny,5,w13=n16-k32-w4-s1;w2=n16-k32-w4-s1;block_m=32,"
                     "dept_up=n32-k32-w4-s1;expert_up=n32-k32-w4-s1;expert_down=n32-k32-w4-s1;"
                     "dept_down=n32-k32-w4-s1;dept_block_m=16;expert_block_m=16\n")
    got = list(committed_points(["tiny:5", "tiny:2"], TINY, str(table), "cpu",
                                shapes=lambda m: types.SimpleNamespace(baseline=MOE, deamoe=DEA)))
    order = [(g[1].kind, g[3]) for g in got]
    assert order == [("moe", 5), ("moe", 2), ("deamoe", 5), ("deamoe", 2)]
    assert got[0][4]["block_m"] == 32 and got[3][4]["dense_dept_up"] == 1
    # inputs: one per layer step of the reported graph (2 copies x 2), each its batch's rows
    assert all(len(g[2]) == 2 and len(g[5].live) == 4 and g[5].live[0].shape[0] == g[3]
               for g in got)
    assert all(g[6] > 0 for g in got)


def test_committed_points_run_bf16_picks_on_fp8_weights_fitted_to_the_scale_blocks(tmp_path):
    # a table without weight_dtype holds bf16 picks: on FP8 weights each GEMM tile gets BLOCK_K
    # within one scale block, as the decode path runs it (a K step of 64 across two 32-column
    # blocks was refused by every launch); a table's own FP8 picks are timed as picked
    import types

    from deamoe.bench.microbench import committed_points
    from deamoe.kernels.fp8 import Fp8Format

    fmt = Fp8Format(32, 32)
    tiles = "w13=n32-k32-w4-s1;w2=n16-k64-w4-s1;block_m=16"
    (tmp_path / "bf16.csv").write_text(f"model,batch,baseline_tile,deamoe_tile\ntiny,2,{tiles},failed\n")
    (tmp_path / "fp8.csv").write_text("model,batch,weight_dtype,baseline_tile,deamoe_tile\n"
                                      f"tiny,2,fp8,{tiles.replace('k64', 'k16')},failed\n")
    knobs = {name: next(committed_points(["tiny:2"], ONE_STEP, str(tmp_path / name), "cpu",
                                         shapes=lambda m: types.SimpleNamespace(baseline=MOE),
                                         kinds=("baseline",), fp8=fmt))[4]
             for name in ("bf16.csv", "fp8.csv")}
    assert knobs["bf16.csv"] == {"w13": "n32-k32-w4-s1", "w2": "n16-k32-w4-s1", "block_m": 16}
    assert knobs["fp8.csv"]["w2"] == "n16-k16-w4-s1"


def test_time_knob_sets_times_each_set_per_round_and_marks_failures(capsys):
    # the A/B tools' timing: every set once per round; a set that cannot run (a tile whose
    # BLOCK_N is no power of two) is NaN with a printed line, the others still timed
    import math

    from deamoe.bench.microbench import layer_copies, point_inputs, time_knob_sets

    weights = layer_copies(DEA_2, ONE_STEP, "cpu")
    inputs, _, _ = point_inputs(DEA_2, weights, 1, ONE_STEP, "cpu")
    base = {"dept_up": "n32-k32-w4-s1", "expert_up": "n32-k32-w4-s1",
            "expert_down": "n32-k32-w4-s1", "dept_down": "n32-k32-w4-s1", "dept_block_m": 16,
            "expert_block_m": 16}
    sets = {"plain": base, "bad tile": {**base, "dept_down": "n24-k32-w4-s1"}}
    runs = time_knob_sets(DEA_2, weights, inputs, sets, ONE_STEP, rounds=2, replays=1,
                          label="tiny 1")
    assert len(runs["plain"]) == 2 and all(v > 0 for v in runs["plain"])
    assert len(runs["bad tile"]) == 2 and all(math.isnan(v) for v in runs["bad tile"])
    assert "tiny 1 deamoe bad tile" in capsys.readouterr().out


def test_time_knob_sets_pass_a_switch_knob_as_a_tiles_field(monkeypatch):
    # an A/B of a kernel switch is a knob like any other: s_bf16=0 reaches the layer as
    # DeaMoETiles(s_bf16=False); a knob the tiles do not have fails that set alone (NaN)
    import math

    from deamoe.bench import microbench

    seen = []
    real = microbench.layer_steps

    def spy(shape, weights, xs, tiles, *args, **kw):
        seen.append(tiles.s_bf16)
        return real(shape, weights, xs, tiles, *args, **kw)
    monkeypatch.setattr(microbench, "layer_steps", spy)
    weights = microbench.layer_copies(DEA_2, ONE_STEP, "cpu")
    inputs, _, _ = microbench.point_inputs(DEA_2, weights, 1, ONE_STEP, "cpu")
    base = {"split_launches": 2}
    sets = {"on": base, "off": {**base, "s_bf16": 0}, "typo": {**base, "s_bf16x": 0}}
    runs = microbench.time_knob_sets(DEA_2, weights, inputs, sets, ONE_STEP, rounds=1,
                                     replays=1)
    assert seen == [True, False]
    assert runs["off"][0] > 0 and math.isnan(runs["typo"][0])


def test_variants_arguments_split_into_knob_sets_and_points():
    # `bench variants`: NAME:KNOB=VALUE sets (moe/ for the baseline), MODEL:BATCH points; a
    # '+sfx' value appends to the committed tile of that knob, or sets its flags and counts
    from deamoe.bench.tools import apply_variant, parse_variants

    sets, points = parse_variants(["s3:split_launches=3,dense_dept_up=1", "Qwen3-235B-A22B:4",
                                   "moe/w:w13=+nf", "Baseline-7B:128"])
    assert points == ["Qwen3-235B-A22B:4", "Baseline-7B:128"]
    assert sets == {"moe": {"moe/w": {"w13": "+nf"}},
                    "deamoe": {"s3": {"split_launches": 3, "dense_dept_up": 1}}}
    committed = {"w13": "n64-k128-w4-s4", "w2": "n32-k128-w4-s3", "split_launches": 2}
    assert apply_variant(committed, sets["moe"]["moe/w"]) == {
        "w13": "n64-k128-w4-s4-nf", "w2": "n32-k128-w4-s3", "split_launches": 2}
    # a flag with its own place in the name goes there, past a committed '-nf'
    assert apply_variant({"w13": "n64-k128-w4-s4-nf", "w2": "n64-k128-w4-s4-tma-swap"},
                         {"w13": "+pq", "w2": "+pq"}) == {
        "w13": "n64-k128-w4-s4-pq-nf", "w2": "n64-k128-w4-s4-tma-swap-pq"}
    assert apply_variant({"dept_up": "n64-k128-w4-s4-pq-nf"}, {"dept_up": "+qs"}) == {
        "dept_up": "n64-k128-w4-s4-pq-qs-nf"}
    assert apply_variant({"w13": "n64-k128-w4-s4-nf"}, {"w13": "+x"}) == {"w13": "n64-k128-w4-s4-nf-x"}
    # a count replaced in place, with or beside flags: one variant over points whose picks differ
    assert apply_variant({"dept_up": "n64-k128-w4-s4-pq-nf", "expert_up": "n128-k128-w4-s5-tma"},
                         {"dept_up": "+k256", "expert_up": "+k256-s3-swap"}) == {
        "dept_up": "n64-k256-w4-s4-pq-nf", "expert_up": "n128-k256-w4-s3-tma-swap"}
    # nothing changed, a count given twice: the appended text, which make_tiles refuses
    assert apply_variant({"w2": "n64-k128-w4-s4"}, {"w2": "+k128"}) == {"w2": "n64-k128-w4-s4-k128"}
    assert apply_variant({"w2": "n64-k128-w4-s4"}, {"w2": "+k256-k64"}) == {
        "w2": "n64-k128-w4-s4-k256-k64"}


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_layer_steps_take_the_routing_or_the_logits_computed_beforehand(shape):
    from deamoe.bench.layer_step import layer_steps, router_logits
    from deamoe.decode.step import step_routing

    w = random_weights(shape, "cpu", dtype=torch.float32, seed=4)
    x = torch.randn(5, shape.h, generator=torch.Generator().manual_seed(4))
    layer_steps(shape, [w], [x], repeat=1, routed=[step_routing(shape, w, x)])()
    layer_steps(shape, [w], [x], repeat=1, logits=router_logits([w], [x]))()


def test_graph_replay_rows_check_each_replay_against_the_reference():
    # the GPU checks' timed-path rows (eager on the CPU): the output is poisoned before
    # every replay, so a replay that wrote nothing or a wrong reference fails its row
    from deamoe.bench.layer_step import graph_replay_rows
    from deamoe.kernels.deamoe_decode import DeaMoETiles

    w = random_weights(DEA, "cpu", dtype=torch.float32, seed=3)
    x = torch.randn(5, DEA.h)
    tiles = DeaMoETiles(dense_dept_up=True)
    ref = ffn_step(DEA, w, x, tiles=DeaMoETiles()).float()
    rows = graph_replay_rows(DEA, w, x, tiles, ref, replays=2, case="tiny")
    assert [r["case"] for r in rows] == ["tiny replay 0", "tiny replay 1"]
    assert all(r["ok"] and r["rel_err"] < 1e-4 for r in rows), rows
    bad = graph_replay_rows(DEA, w, x, tiles, 2 * ref, case="tiny")
    assert not bad[0]["ok"]


def test_decode_step_and_table():
    dec = DecoderShape(n_layers=2, heads=4, context=8, vocab=50)
    rows = run_decode(["tiny"], [2], dec, replays=1, device="cpu", shapes={"tiny": (MOE, DEA)})
    prov = {"device": "cpu", "torch": "x", "date": "2026-12-05", "git_sha": "s"}
    (row,) = tpot_table(rows, prov, dec)
    assert row["batch"] == 2 and row["baseline_tpot_ms"] > 0
    assert row["speedup"] == row["baseline_tpot_ms"] / row["deamoe_tpot_ms"]
    assert (row["layers"], row["heads"], row["context"], row["vocab"]) == (2, 4, 8, 50)
    assert (row["gpu"], row["git_sha"]) == ("cpu", "s")


def test_settings_reject_bad_values():
    with pytest.raises(ConfigError, match="tiles"):
        MicrobenchSettings(tiles=["n64-k128"])
    with pytest.raises(ConfigError, match="unknown model"):
        MicrobenchSettings(models=["GPT-9"])
    with pytest.raises(ConfigError, match="split_launches"):
        MicrobenchSettings(split_launches=[0])
    with pytest.raises(ConfigError, match="dense_dept_up"):
        MicrobenchSettings(dense_dept_up=["yes"])
    with pytest.raises(ConfigError, match="min_layers_per_graph"):
        MicrobenchSettings(min_layers_per_graph=0)
    with pytest.raises(ConfigError, match="final_tile_pass"):
        MicrobenchSettings(final_tile_pass="yes")
    with pytest.raises(ConfigError, match="routing_draws"):
        MicrobenchSettings(routing_draws=0)


def test_cli_without_cuda_writes_status(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("microbench:\n  batches: [4]\n")
    out = tmp_path / "mb"
    r = subprocess.run([sys.executable, "-m", "deamoe", "microbench", "--config", str(cfg),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "not run" and status["reason"] == "no CUDA GPU"


def test_cli_rejects_unknown_config_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("microbench:\n  batchez: [4]\n")
    r = subprocess.run([sys.executable, "-m", "deamoe", "microbench", "--config", str(cfg),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 2 and "microbench.batchez" in r.stderr


def test_cli_tiles_from_names_a_missing_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("microbench:\n  batches: [4]\n")
    r = subprocess.run([sys.executable, "-m", "deamoe", "microbench", "--config", str(cfg),
                        "--out", str(tmp_path / "o"), "--tiles-from", str(tmp_path / "no.csv")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--tiles-from" in r.stderr and "no.csv" in r.stderr
    r = subprocess.run([sys.executable, "-m", "deamoe", "microbench", "--config", str(cfg),
                        "--out", str(tmp_path / "o"), "--tiles-from", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and f"--tiles-from: {tmp_path} is a folder; give the microbench.csv in it" in r.stderr


def test_decode_tiles_prefer_this_runs_picks_and_fill_in_from_another_table():
    from deamoe.bench.run import decode_tiles
    from deamoe.shapes import table1_row

    def row(model, batch, base, dea):
        return {"model": model, "batch": batch, "baseline_tile": base, "deamoe_tile": dea}
    ours = [row("Baseline-7B", 8, "w13=n64-k64-w4-s3;split_launches=2", "failed")]
    other = [row("Baseline-7B", 8, "w13=n128-k64-w4-s3", "split_launches=4"),
             row("Baseline-7B", 16, "block_m=32", "dense_dept_up=1"),
             row("Qwen3-235B-A22B", 16, "library", "library")]
    best = decode_tiles(ours, other)
    base, dea = table1_row("Baseline-7B").baseline, table1_row("Baseline-7B").deamoe
    assert best.tiles(base, 8).split_launches == 2  # this run's pick wins
    assert best.tiles(base, 8).w13.block_n == 64
    assert best.tiles(base, 16).block_m == 32
    assert best.tiles(dea, 16).dense_dept_up is True
    assert best.tiles(dea, 8).split_launches == 4  # this run's search failed there
    assert best.knobs(base, 160) == (16, "block_m=32")  # beyond the table: the nearest batch
    assert best.knobs(table1_row("Qwen3-235B-A22B").baseline, 16) is None


def test_decode_runs_the_nearest_pick_and_names_it():
    from deamoe.decode.picks import TilePicks, shape_key

    dec = DecoderShape(n_layers=1, heads=4, context=8, vocab=50)
    picks = TilePicks({shape_key(MOE): {2: "split_launches=2"}})
    rows = run_decode(["tiny"], [3], dec, replays=1, device="cpu", shapes={"tiny": (MOE, DEA)},
                      tiles=picks)
    assert {r["ffn"]: r["tiles_batch"] for r in rows} == {"baseline": 2, "deamoe": None}


def test_merge_tpot_replaces_the_same_points(tmp_path):
    import pandas as pd

    from deamoe.bench.decode import merge_tpot

    cols = ["model", "batch", "baseline_tpot_ms", "deamoe_tpot_ms", "date", "git_sha"]
    into, new = tmp_path / "into.csv", tmp_path / "new.csv"
    when = ["2026-12-01", "abc"]
    pd.DataFrame([["m", 4, 1.0, 1.0, *when], ["m", 8, 2.0, 2.0, *when]], columns=cols).to_csv(into, index=False)
    pd.DataFrame([["m", 160, 5.0, 6.0, *when], ["m", 8, 3.0, 2.5, *when]], columns=cols).to_csv(new, index=False)
    assert merge_tpot(new, into) == 3
    got = pd.read_csv(into)
    assert got["batch"].tolist() == [4, 8, 160] and got["baseline_tpot_ms"].tolist() == [1, 3, 5]
    pd.DataFrame({"model": ["m"]}).to_csv(new, index=False)
    with pytest.raises(DataError, match="new.csv: missing column"):
        merge_tpot(new, into)
