"""The benchmark code paths at tiny shapes on the CPU (interpreter kernels, host-clock timing)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.bench.decode import DecoderShape, run_decode, tpot_table
from deamoe.bench.layer_step import ffn_step, layer_bytes, random_weights, step_bytes
from deamoe.bench.microbench import (
    BLOCK_M_KNOBS,
    GEMM_STAGES,
    MicrobenchSettings,
    bench_impl,
    knobs_name,
    parse_knobs,
    search_tiles,
)
from deamoe.config import DeaMoEShape, MoEShape
from deamoe.errors import ConfigError

MOE = MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4)
DEA = DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5)
TINY = MicrobenchSettings(tiles=["n32-k32-w4-s1", "n16-k32-w4-s1"], select_replays=1, replays=1,
                          rotate_bytes=1e9, max_copies=2, compile_routing=False,
                          coordinate_search=False, stage_batches=[])


def test_step_bytes_counts_distinct_experts_and_departments():
    ids = torch.tensor([[0, 1, 4, 5, 6], [0, 2, 3, 8, 9]])  # depts (4 per dept): {0,1} and {0,2}
    f, h = DEA.h_ffn, DEA.h
    router = 2 * DEA.n_expert * h
    assert step_bytes(DEA, ids) == router + 3 * (2 * 3 * f * h) + 9 * (2 * 3 * f * f)
    assert step_bytes(MOE, ids[:, :4]) == 2 * MOE.n_expert * h + 7 * (2 * 3 * f * h)
    assert layer_bytes(MOE) == 2 * 16 * 64 + 16 * 2 * 3 * 32 * 64


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_ffn_step_runs_the_kernel(shape):
    w = random_weights(shape, "cpu", torch.float32, seed=1)
    out = ffn_step(shape, w, torch.randn(3, shape.h))
    assert out.shape == (3, shape.h) and torch.isfinite(out).all()


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
def test_bench_impl_rows(shape):
    rows = bench_impl(shape, [3], TINY, device="cpu")
    (row,) = rows
    knobs = parse_knobs(row["tile"])
    assert row["batch"] == 3 and row["us"] > 0
    assert set(knobs) == set(GEMM_STAGES[shape.kind]) | set(BLOCK_M_KNOBS[shape.kind])
    assert all(knobs[st] in TINY.tiles for st in GEMM_STAGES[shape.kind])
    assert row["copies"] == 2 and row["bytes"] > 2 * shape.n_expert * shape.h
    # the reported time comes from a graph of >= min_layers_per_graph (8) layer steps
    assert row["layers"] == 8


def test_committed_points_yield_the_picked_knobs(tmp_path):
    # what the A/B scripts re-time: each point's committed knobs, baseline layer first, inputs
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
    assert all(len(g[2]) == 2 and len(g[5]) == 2 and g[5][0].shape[0] == g[3] for g in got)
    assert all(g[6] > 0 for g in got)


def test_time_knob_sets_times_each_set_per_round_and_marks_failures(capsys):
    # the A/B scripts' timing: every set once per round; a set that cannot run (a tile whose
    # BLOCK_N is no power of two) is NaN with a printed line, the others still timed
    import math

    from deamoe.bench.microbench import layer_copies, point_inputs, time_knob_sets

    weights = layer_copies(DEA, TINY, "cpu")
    xs, _, _ = point_inputs(DEA, weights, 3, TINY, "cpu")
    base = {"dept_up": "n32-k32-w4-s1", "expert_up": "n32-k32-w4-s1",
            "expert_down": "n32-k32-w4-s1", "dept_down": "n32-k32-w4-s1", "dept_block_m": 16,
            "expert_block_m": 16}
    sets = {"plain": base, "bad tile": {**base, "dept_down": "n24-k32-w4-s1"}}
    runs = time_knob_sets(DEA, weights, xs, sets, TINY, rounds=2, replays=1, label="tiny 3")
    assert len(runs["plain"]) == 2 and all(v > 0 for v in runs["plain"])
    assert len(runs["bad tile"]) == 2 and all(math.isnan(v) for v in runs["bad tile"])
    assert "tiny 3 deamoe bad tile" in capsys.readouterr().out


def test_point_parser_reads_points_and_rejects_a_bad_number(capsys):
    # the re-timing scripts' arguments (h200_overlap_bound.py, h200_head_cost.py)
    from deamoe.bench.microbench import point_parser

    args = point_parser("doc line\nmore").parse_args(["out", "Qwen3-235B-A22B:64", "A:1",
                                                       "--rounds", "3"])
    assert (str(args.out), args.points, args.rounds, args.replays) == (
        "out", ["Qwen3-235B-A22B:64", "A:1"], 3, 50)
    with pytest.raises(SystemExit):
        point_parser("doc").parse_args(["out", "A:1", "--replays", "many"])
    assert "--replays: invalid int value: 'many'" in capsys.readouterr().err


def test_graph_replay_rows_check_each_replay_against_the_reference():
    # the H200 check scripts' timed-path rows (eager on the CPU): the output is poisoned before
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
    prov = {"device": "cpu", "torch": "x", "date": "d", "git_sha": "s"}
    (row,) = tpot_table(rows, prov, dec)
    assert row["batch"] == 2 and row["baseline_tpot_ms"] > 0 and row["speedup"] > 0


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


def test_schema_matches_settings():
    import dataclasses
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    schema = yaml.safe_load((root / "workflow/schemas/microbench.schema.yaml").read_text())
    fields = {f.name: f for f in dataclasses.fields(MicrobenchSettings)}
    assert set(schema["properties"]) == set(fields)
    defaults = MicrobenchSettings()
    for key, prop in schema["properties"].items():
        assert prop["default"] == getattr(defaults, key), key


def test_search_tiles_coordinate_pass():
    # a fake cost: the best is w13=A, w2=B, block_m=32 -- only reachable by the coordinate pass
    s = MicrobenchSettings(tiles=["n64-k64-w4-s1", "n32-k64-w4-s1"], block_m=16,
                           grid_order=False)
    cost = {"w13": {"n64-k64-w4-s1": 0, "n32-k64-w4-s1": 5},
            "w2": {"n64-k64-w4-s1": 3, "n32-k64-w4-s1": 0}, "block_m": {16: 2, 32: 0, 64: 1},
            "split_launches": {2: 1, 4: 1}}
    best = search_tiles(MOE, lambda k: sum(cost[n][v] for n, v in k.items()), s)
    assert best == {"w13": "n64-k64-w4-s1", "w2": "n32-k64-w4-s1", "block_m": 32}
    assert parse_knobs(knobs_name(best)) == best
    # a split that pays is kept, on the tiles found
    cost["split_launches"] = {2: -1, 4: 0}
    best = search_tiles(MOE, lambda k: sum(cost[n][v] for n, v in k.items()), s)
    assert best == {"w13": "n64-k64-w4-s1", "w2": "n32-k64-w4-s1", "block_m": 32,
                    "split_launches": 2}
    assert parse_knobs(knobs_name(best)) == best


def test_search_tries_dense_dept_up_for_deamoe_only():
    s = MicrobenchSettings(tiles=["n64-k64-w4-s1"], block_m=16)
    tried = []

    def cost(k):
        tried.append(dict(k))
        # dense pays only together with 2 parts, and more with its own dept_up tile
        if k.get("dense_dept_up") and k.get("split_launches") == 2:
            return -3 if k["dept_up"] == "n32-k64-w4-s1" else -2
        return 0
    s.tiles.append("n32-k64-w4-s1")
    best = search_tiles(DEA, cost, s)
    assert best["dense_dept_up"] == 1 and best["split_launches"] == 2
    assert best["dept_up"] == "n32-k64-w4-s1" and best["dept_down"] == "n64-k64-w4-s1"
    assert parse_knobs(knobs_name(best)) == best
    from deamoe.bench.microbench import make_tiles

    assert make_tiles(DEA, best).dense_dept_up is True
    tried.clear()
    search_tiles(MOE, cost, s)
    assert tried and not any("dense_dept_up" in k for k in tried)
    tried.clear()
    search_tiles(DEA, cost, MicrobenchSettings(tiles=["n64-k64-w4-s1"],
                                               dense_dept_up=[False]))
    assert not any("dense_dept_up" in k for k in tried)


def test_final_tile_pass_retunes_the_tiles_on_the_final_knobs():
    # expert_down's best tile changes once dense_dept_up is on (as v21 measured for DeaMoE-7B):
    # only the pass after the dense step finds it
    a, b = "n64-k64-w4-s1", "n32-k64-w4-s1"

    def cost(k):
        t = 0 if k.get("dense_dept_up") else 1
        if k["expert_down"] == b:
            t += -2 if k.get("dense_dept_up") else 5
        return t
    off = search_tiles(DEA, cost, MicrobenchSettings(tiles=[a, b], final_tile_pass=False))
    on = search_tiles(DEA, cost, MicrobenchSettings(tiles=[a, b], final_tile_pass=True))
    assert off["dense_dept_up"] == 1 and off["expert_down"] == a
    assert on["dense_dept_up"] == 1 and on["expert_down"] == b
    assert cost(on) < cost(off)


def test_grid_order_search_tries_nf_with_and_without_split():
    # v36: the N-tile-fastest order pays on the expert GEMMs only without a split, which the
    # search chose before it; the final pass then refines a tile keeping its -nf
    from deamoe.bench.microbench import make_tiles

    a, b = "n64-k64-w4-s1", "n32-k64-w4-s1"
    tried = []

    def cost(k):
        tried.append(dict(k))
        split = k.get("split_launches", 1)
        t = -1.0 if split == 2 else 0.0
        nf = {g for g in ("dept_up", "expert_up", "expert_down", "dept_down")
              if k[g].endswith("-nf")}
        if nf == {"expert_up", "expert_down"}:
            t += -3 if split == 1 else 5
        elif nf:
            t += 1
        t += {b + "-nf": -1, b: 2}.get(k["expert_down"], 0)
        return t
    s = MicrobenchSettings(tiles=[a, b], dense_dept_up=[False], split_launches=[1, 2])
    best = search_tiles(DEA, cost, s)
    assert best["expert_up"] == a + "-nf" and best["expert_down"] == b + "-nf"
    assert best["dept_up"] == a and best["dept_down"] == a and best["split_launches"] == 1
    assert make_tiles(DEA, best).expert_down.nfast and not make_tiles(DEA, best).dept_up.nfast
    assert parse_knobs(knobs_name(best)) == best
    tried.clear()
    search_tiles(DEA, cost, MicrobenchSettings(tiles=[a, b], dense_dept_up=[False],
                                               split_launches=[1, 2], grid_order=False))
    assert not any(str(v).endswith("-nf") for k in tried for v in k.values())
    with pytest.raises(ConfigError, match="grid_order"):
        MicrobenchSettings(grid_order="yes")


def test_pick_finalist_retimes_the_best_distinct_candidates():
    from deamoe.bench.microbench import pick_finalist

    a, b, c, d = ({"t": i} for i in range(4))
    tried = [(1.0, a), (1.1, b), (1.0, a), (1.2, c), (5.0, d)]
    retimed = []

    def measure(k):
        retimed.append(k["t"])
        return {0: 3.0, 1: 2.0, 2: 2.5}[k["t"]]  # the search's best was noise
    assert pick_finalist(tried, 3, measure) == b
    assert retimed == [0, 1, 2]  # d (5.0) is not a finalist; a is timed once
    assert pick_finalist(tried, 1, measure) == a and pick_finalist([], 3, measure) is None
    with pytest.raises(ConfigError, match="finalists"):
        MicrobenchSettings(finalists=0)


def test_previous_pick_is_always_a_finalist(tmp_path):
    # v37b: the search lost a pick the previous table had (noise in its few-replay trials);
    # the previous pick joins the finalists, re-timed with the full replay count, and wins here
    from deamoe.bench.microbench import prior_picks, search_point

    a, b = "n64-k64-w4-s1", "n32-k64-w4-s1"
    prev = {"w13": b, "w2": b, "block_m": 16}
    full = []

    def measure(k, replays=1):
        if replays > 1:
            full.append(dict(k))
            return 1.0 if k == prev else 2.0  # the truth, at the full replay count
        return 1.5 if k == prev else 0.5 + len(full)  # noisy trials favour everything else
    s = MicrobenchSettings(tiles=[a, b], finalists=2, replays=50, grid_order=False,
                           split_launches=[1])
    assert search_point(MOE, measure, s, 16) != prev  # without it: lost
    full.clear()
    assert search_point(MOE, measure, s, 16, prior=prev) == prev
    assert prev in full and len(full) == 3  # the two best trials and the previous pick
    # the picks of a microbench.csv, by model, kind and batch ("failed" rows skipped)
    path = tmp_path / "mb.csv"
    path.write_text("model,batch,baseline_tile,deamoe_tile\n"
                    f"M,16,w13={b};w2={a};block_m=16,failed\n"
                    f"M,64,w13={a};w2={a};block_m=32;split_launches=2,dept_up={a}\n"
                    f"N,16,w13={a};w2={a};block_m=16,failed\n")
    assert prior_picks(str(path), "M", "baseline") == {
        16: {"w13": b, "w2": a, "block_m": 16},
        64: {"w13": a, "w2": a, "block_m": 32, "split_launches": 2}}
    assert prior_picks(str(path), "M", "deamoe") == {64: {"dept_up": a}}
    assert prior_picks("", "M", "baseline") == {} and prior_picks(str(path), "X", "deamoe") == {}
    with pytest.raises(ConfigError, match="prior_picks: no such file 'nope.csv'"):
        MicrobenchSettings(prior_picks="nope.csv")


def test_block_m_search_is_capped_by_batch():
    from deamoe.bench.microbench import block_m_values

    assert block_m_values((16, 32, 64, 128), 4) == (16,)
    assert block_m_values((16, 32, 64, 128), 40) == (16, 32, 64)
    assert block_m_values((16, 32, 64, 128), 128) == (16, 32, 64, 128)
    s = MicrobenchSettings(tiles=["n64-k64-w4-s1"], block_m=16, grid_order=False)
    cost = {"w13": {"n64-k64-w4-s1": 0}, "w2": {"n64-k64-w4-s1": 0}, "block_m": {16: 2, 32: 1, 64: 0},
            "split_launches": {2: 1, 4: 1}}
    tried = []

    def measure(k):
        tried.append(k["block_m"])
        return sum(cost[n][v] for n, v in k.items())
    assert search_tiles(MOE, measure, s, batch=20)["block_m"] == 32  # 64 > next_pow2(20)
    assert 64 not in tried


@pytest.mark.slow
def test_compiled_routing_is_the_same_routing():
    from deamoe.bench.layer_step import routing_fn
    from deamoe.routing import route

    for shape in (MOE, DEA):
        logits = torch.randn(7, shape.n_expert)
        a, b = routing_fn(True)(shape, logits), route(shape, logits)
        assert torch.equal(a[0], b[0]) and torch.allclose(a[1], b[1])
