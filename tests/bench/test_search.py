"""The microbenchmark's knob search (deamoe.bench.search) on fake measures: which knobs each
step tries and keeps, for both layer kinds."""

from __future__ import annotations

import pytest

from deamoe.decode.knobs import knobs_name, make_tiles, parse_knobs
from deamoe.bench.settings import MicrobenchSettings
from deamoe.bench.search import on_stage, search_tiles
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.errors import ConfigError

MOE = MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4)
DEA = DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5)


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
    assert make_tiles(DEA, best).dense_dept_up is True
    tried.clear()
    search_tiles(MOE, cost, s)
    assert tried and not any("dense_dept_up" in k for k in tried)
    tried.clear()
    search_tiles(DEA, cost, MicrobenchSettings(tiles=["n64-k64-w4-s1"],
                                               dense_dept_up=[False]))
    assert not any("dense_dept_up" in k for k in tried)


def test_search_tries_dense_parts_at_the_dense_picks_split():
    # with the dense pick split in 4 parts, 1..3 dense parts are tried on it (and only
    # there); a count that pays is kept and survives the grid-order trials, which drop it
    # where they change the split
    s = MicrobenchSettings(tiles=["n64-k64-w4-s1"], block_m=16, final_tile_pass=False)
    tried = []

    def cost(k):
        tried.append(dict(k))
        if "dense_parts" in k:
            assert k.get("dense_dept_up") and 0 < k["dense_parts"] < k["split_launches"]
        t = -2 if k.get("dense_dept_up") and k.get("split_launches") == 4 else 0
        return t - {3: 1, 2: 0.5}.get(k.get("dense_parts"), 0)
    best = search_tiles(DEA, cost, s)
    assert best["dense_dept_up"] == 1 and best["split_launches"] == 4
    assert best["dense_parts"] == 3 and make_tiles(DEA, best).dense_parts == 3
    assert parse_knobs(knobs_name(best)) == best
    plain = [k for k in tried if not any(str(v).endswith("-nf") for v in k.values())]
    assert sorted(k["dense_parts"] for k in plain if "dense_parts" in k) == [1, 2, 3]
    tried.clear()
    search_tiles(DEA, cost, MicrobenchSettings(tiles=["n64-k64-w4-s1"], dense_parts=False))
    assert not any("dense_parts" in k for k in tried)
    with pytest.raises(ConfigError, match="dense_parts"):
        MicrobenchSettings(dense_parts=1)


def test_final_tile_pass_retunes_the_tiles_on_the_final_knobs():
    # expert_down's best tile changes once dense_dept_up is on (as measured for DeaMoE-7B):
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
    # the N-tile-fastest order pays on the expert GEMMs only without a split, which the
    # search chose before it; the final pass then refines a tile keeping its -nf
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
    from deamoe.bench.search import pick_finalist

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


def test_finalists_are_timed_by_the_final_measure():
    # the trials run on one-layer graphs, the reported time on >= 8 layer steps, and the
    # two ranked Qwen3's dense department tiles differently: the finalists are timed the
    # reported way when the caller gives that measure
    from deamoe.bench.search import search_point

    a, b = "n64-k64-w4-s1", "n32-k64-w4-s1"
    s = MicrobenchSettings(tiles=[a, b], finalists=2, replays=50, grid_order=False,
                           split_launches=[1], coordinate_search=False)
    trial = {a: 1.0, b: 1.1}  # trials and their full-replay re-timing favour a
    final = {a: 2.0, b: 1.9}  # the reported graph favours b
    finals = []

    def measure(k, replays=1):
        return trial[k["w13"]]

    def final_measure(k):
        finals.append(k["w13"])
        return final[k["w13"]]
    assert search_point(MOE, measure, s, 16)["w13"] == a
    assert search_point(MOE, measure, s, 16, final_measure=final_measure)["w13"] == b
    assert sorted(finals) == sorted([a, b])  # each finalist once


def test_dense_parts_of_the_pick_are_timed_by_the_final_measure():
    # the trials never favour dense_parts, the reported graph does (2 of 4 parts dense):
    # the pick's dense-part counts are timed the reported way; not for the baseline, and not
    # with the setting off
    from deamoe.bench.search import search_point

    a = "n64-k64-w4-s1"
    s = MicrobenchSettings(tiles=[a], finalists=1, grid_order=False, split_launches=[1, 4],
                           final_tile_pass=False, pair_dept_down=False)
    finals = []

    def measure(k, replays=1):
        return -1.0 if k.get("dense_dept_up") and k.get("split_launches") == 4 else 0.0

    def final_measure(k):
        finals.append(k.get("dense_parts", 0))
        return {2: -2.0}.get(k.get("dense_parts"), measure(k))
    pick = search_point(DEA, measure, s, 4, final_measure=final_measure)
    assert pick["dense_parts"] == 2 and pick["split_launches"] == 4
    assert sorted(finals) == [0, 1, 2, 3]  # the pick (sole finalist, so not re-timed) + 3 counts
    finals.clear()
    off = MicrobenchSettings(tiles=[a], finalists=1, grid_order=False, split_launches=[1, 4],
                             final_tile_pass=False, dense_parts=False, pair_dept_down=False)
    assert "dense_parts" not in search_point(DEA, measure, off, 4, final_measure=final_measure)
    assert finals == []
    finals.clear()
    assert "dense_parts" not in search_point(MOE, measure, s, 4, final_measure=final_measure)


def test_pair_dept_down_of_the_pick_is_timed_by_the_final_measure():
    # the pick, with pair_dept_down, and on w8a8 with expert_down '-qo' where dept_down's BLOCK_K
    # divides its BLOCK_N: each timed once the reported way, the fastest kept; not for the
    # baseline, not with the setting off; a '-qo' the tiles cannot take is not tried
    from deamoe.bench.search import pair_dept_down_pass, search_point

    a, narrow = "n64-k64-w4-s1", "n32-k64-w4-s1"
    s = MicrobenchSettings(tiles=[a], finalists=1, grid_order=False, split_launches=[1],
                           dense_dept_up=[False], final_tile_pass=False)
    finals = []

    def final_measure(k):
        finals.append(knobs_name(k))
        return {(1, a + "-qo"): -2.0, (1, a): -1.0}.get(
            (k.get("pair_dept_down", 0), k["expert_down"]), 0.0)
    pick = search_point(DEA, lambda k, replays=1: 0.0, s, 4, final_measure=final_measure)
    assert pick["pair_dept_down"] == 1 and pick["expert_down"] == a and len(finals) == 2
    assert make_tiles(DEA, pick).pair_dept_down is True
    finals.clear()
    pick = search_point(DEA, lambda k, replays=1: 0.0, s, 4, final_measure=final_measure,
                        qout=True)
    assert pick["expert_down"] == a + "-qo" and len(finals) == 3 == len(set(finals))
    finals.clear()  # expert_down's 32-column groups: dept_down's 64-deep K steps cannot read them
    narrow_pick = {"dept_up": a, "expert_up": a, "expert_down": narrow, "dept_down": a,
                   "dept_block_m": 16, "expert_block_m": 16}
    pass_pick = pair_dept_down_pass(DEA, narrow_pick, final_measure, s, qout=True)
    assert len(finals) == 2 and not any("-qo" in f for f in finals)
    assert pass_pick == narrow_pick  # both score 0.0: the plain pick, first, kept
    finals.clear()
    off = MicrobenchSettings(tiles=[a], finalists=1, grid_order=False, split_launches=[1],
                             dense_dept_up=[False], final_tile_pass=False, pair_dept_down=False)
    assert "pair_dept_down" not in search_point(DEA, lambda k, replays=1: 0.0, off, 4,
                                                final_measure=final_measure, qout=True)
    assert finals == []
    assert "pair_dept_down" not in search_point(MOE, lambda k, replays=1: 0.0, s, 4,
                                                final_measure=final_measure, qout=True)
    with pytest.raises(ConfigError, match="pair_dept_down"):
        MicrobenchSettings(pair_dept_down=1)


def test_previous_pick_is_always_a_finalist(tmp_path):
    # the search lost a pick the previous table had (noise in its few-replay trials);
    # the previous pick joins the finalists, re-timed with the full replay count, and wins here
    from deamoe.bench.search import prior_picks, search_point

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
    assert search_point(MOE, measure, s, 16, prior=[prev]) == prev
    assert prev in full and len(full) == 3  # the two best trials and the previous pick
    # picks of several tables: each is a finalist, a duplicate or one that fails is not
    full.clear()
    other = {"w13": a, "w2": b, "block_m": 16}

    def measure_or_fail(k, replays=1):
        return None if k.get("w13") == "n8-k8-w1-s1" else measure(k, replays)
    broken = {"w13": "n8-k8-w1-s1", "w2": a, "block_m": 16}
    assert search_point(MOE, measure_or_fail, s, 16, prior=[other, prev, broken, prev]) == prev
    assert other in full and prev in full and broken not in full and len(full) == 4
    # the picks of a microbench.csv, by model, kind and batch ("failed" rows skipped)
    path = tmp_path / "mb.csv"
    path.write_text("model,batch,baseline_tile,deamoe_tile\n"
                    f"M,16,w13={b};w2={a};block_m=16,failed\n"
                    f"M,64,w13={a};w2={a};block_m=32;split_launches=2,dept_up={a}\n"
                    f"N,16,w13={a};w2={a};block_m=16,failed\n")
    assert prior_picks([str(path)], "M", "baseline") == {
        16: [{"w13": b, "w2": a, "block_m": 16}],
        64: [{"w13": a, "w2": a, "block_m": 32, "split_launches": 2}]}
    assert prior_picks([str(path)], "M", "deamoe") == {64: [{"dept_up": a}]}
    assert prior_picks([], "M", "baseline") == {} and prior_picks([str(path)], "X", "deamoe") == {}
    # the config forms: one path, a list, '' (none); empty entries dropped
    assert MicrobenchSettings(prior_picks="").prior_picks == []
    assert MicrobenchSettings(prior_picks=str(path)).prior_picks == [str(path)]
    assert MicrobenchSettings(prior_picks=[str(path), ""]).prior_picks == [str(path)]
    from deamoe.settings import load_section

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"microbench:\n  prior_picks: {path}\n")  # one path, as YAML gives it
    assert load_section(cfg, "microbench", MicrobenchSettings).prior_picks == [str(path)]
    old = tmp_path / "old.csv"
    old.write_text("model,batch,baseline_tile,deamoe_tile\n"
                   f"M,16,w13={a};w2={a};block_m=16,failed\n"
                   f"M,64,w13={a};w2={a};block_m=32;split_launches=2,failed\n")
    both = prior_picks([str(path), str(old)], "M", "baseline")
    assert both[16] == [{"w13": b, "w2": a, "block_m": 16}, {"w13": a, "w2": a, "block_m": 16}]
    assert len(both[64]) == 1  # the same pick in both tables once
    with pytest.raises(ConfigError, match="prior_picks: 'nope.csv': no such file"):
        MicrobenchSettings(prior_picks="nope.csv")
    with pytest.raises(ConfigError, match="prior_picks: 'nope.csv': no such file"):
        MicrobenchSettings(prior_picks=[str(path), "nope.csv"])
    with pytest.raises(ConfigError, match="prior_picks: 3: must be a path"):
        MicrobenchSettings(prior_picks=3)


def test_block_m_search_is_capped_by_batch():
    from deamoe.bench.search import block_m_values

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


def test_a_qo_tile_is_searched_on_the_up_projections_only():
    # one fp8_tiles list serves every GEMM: a '-qo' tile starts the search with its output
    # stored quantised on the up-projections and as the plain '-pq' tile on the GEMMs that sum
    # their output; no trial puts '-qo' on those, and none is timed twice
    s = MicrobenchSettings(tiles=["n64-k64-w4-s1"], block_m=16, grid_order=False,
                           split_launches=[]).searching("bf16")
    s.tiles = ["n128-k128-w4-s1-pq-qo", "n128-k128-w4-s1-pq"]
    for shape, ups, downs in ((MOE, ("w13",), ("w2",)),
                              (DEA, ("dept_up", "expert_up"), ("expert_down", "dept_down"))):
        tried = []

        def cost(k):
            tried.append(dict(k))
            return -sum(v.endswith("-qo") for v in k.values() if isinstance(v, str))
        best = search_tiles(shape, cost, s)
        assert all(not k[d].endswith("-qo") for k in tried for d in downs)
        assert all(best[u] == "n128-k128-w4-s1-pq-qo" for u in ups)
        assert all(best[d] == "n128-k128-w4-s1-pq" for d in downs)
        names = [knobs_name(k) for k in tried]
        assert len(names) == len(set(names))
    # likewise '-qs' (the output stored with its absmax for the next GEMM)
    assert on_stage("w2", "n64-k128-w4-s4-pq-qs-nf") == "n64-k128-w4-s4-pq-nf"
    assert on_stage("expert_up", "n64-k128-w4-s4-pq-qs") == "n64-k128-w4-s4-pq-qs"
