"""The knob search of the microbenchmark, the same for both layers (docs/kernels.md: why each step).

The knobs are deamoe.decode.knobs' (the fields of MoETiles / DeaMoETiles); the values the
search tries are here (the BLOCK_M of each grouping) and in MicrobenchSettings (tiles, splits).

measure(knobs) -> median us (or None for a tile that does not compile / fit); the search walks
the knob space coordinate by coordinate and `search_point` re-times its finalists.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from deamoe.decode.knobs import EXPERT_STAGES, GEMM_STAGES, parse_knobs
from deamoe.kernels.fp8 import UP_PROJECTIONS
from deamoe.kernels.tile_config import TileConfig

if TYPE_CHECKING:
    from deamoe.bench.settings import MicrobenchSettings

# a group holds at most one row per token, so a BLOCK_M above next_pow2(batch) only adds padding:
# the search skips those (see block_m_values).  128-row department blocks let one program see
# all of a department's tokens at 128 tokens, so its weight tile streams once
BLOCK_M_KNOBS = {"moe": {"block_m": (16, 32, 64)},
                 "deamoe": {"dept_block_m": (16, 32, 64, 128), "expert_block_m": (16, 32)}}
# the GEMMs that run on each grouping's blocks: a BLOCK_M is searched together with their tile
GROUPING_GEMMS = {"block_m": ("w13", "w2"), "dept_block_m": ("dept_up", "dept_down"),
                  "expert_block_m": ("expert_up", "expert_down")}


def block_m_values(values, batch: int | None) -> tuple:
    if batch is None:
        return tuple(values)
    cap = max(16, 1 << (max(1, batch) - 1).bit_length())
    return tuple(v for v in values if v <= cap)


def on_stage(stage: str, tile: str) -> str:
    """`tile` as GEMM `stage` can run it: a '-qo' or '-qs' tile (the output stored quantised, or
    with its absmax, for the next GEMM) without it on a GEMM that sums its output
    (fp8.UP_PROJECTIONS), so one list of tiles serves every GEMM."""
    if stage in UP_PROJECTIONS or ("-qo" not in tile and "-qs" not in tile):
        return tile
    return dataclasses.replace(TileConfig.parse(tile), qout=False, qscale=False).name


def joint_knobs(shape, tile: str, block_m: int) -> dict:
    """Every GEMM of the layer on `tile` (on_stage), every grouping on `block_m`: the search's
    start."""
    knobs = {stage: on_stage(stage, tile) for stage in GEMM_STAGES[shape.kind]}
    knobs.update({k: block_m for k in BLOCK_M_KNOBS[shape.kind]})
    return knobs


def search_tiles(shape, measure, s: "MicrobenchSettings", batch: int | None = None):
    """Same search for both layers: best joint tile; then each grouping's BLOCK_M (up to
    next_pow2(batch)), each value tried with every tile on the GEMMs of that grouping (a taller
    block needs a different tile: 128-row department blocks were 1.2-1.6x faster at 128
    tokens, but only with 8-warp tiles, so one knob at a time never reached them); then one
    coordinate pass over each GEMM's tile; then the split_launches values; then, for
    DeaMoE, dense_dept_up with each split value, then its BLOCK_M x dept_up tile,
    then with s.dense_parts each count of dense parts at the dense pick's split;
    with s.grid_order, the N-tile-fastest grid order (-nf) on every GEMM or on the expert
    GEMMs, each with the split found and with none; with s.final_tile_pass, one more
    coordinate pass over each GEMM's tile on those final knobs, keeping each GEMM's grid order
    (DeaMoE-7B 2-4% faster, the rest within 0.5%).
    measure(knobs) -> median us or None; a knob set reached twice is timed once."""
    measure = _timed_once(measure)
    best, best_t = None, None
    for tile in s.tiles:
        knobs = joint_knobs(shape, tile, s.block_m)
        t = measure(knobs)
        if t is not None and (best_t is None or t < best_t):
            best, best_t = knobs, t
    if best is None or not s.coordinate_search:
        return best
    for knob, values in BLOCK_M_KNOBS[shape.kind].items():
        start = dict(best)
        for value in block_m_values(values, batch):
            for tile in [None, *s.tiles]:  # None: keep the current tiles
                trial = {**start, knob: value}
                if tile is not None:
                    trial.update({g: on_stage(g, tile) for g in GROUPING_GEMMS[knob]})
                if trial == best or (tile is None and value == start[knob]):
                    continue
                t = measure(trial)
                if t is not None and t < best_t:
                    best, best_t = trial, t
    best, best_t = tile_pass(shape, measure, s, best, best_t)
    # the groups in parts on parallel streams: one half's launch ramp and tail overlap
    # the other's work; tried last, on the tiles found
    start = dict(best)
    for parts in s.split_launches:
        if parts == 1:
            continue
        trial = {**start, "split_launches": parts}
        t = measure(trial)
        if t is not None and t < best_t:
            best, best_t = trial, t
    if shape.kind == "deamoe" and True in s.dense_dept_up:
        dense, dense_t = dense_dept_trials(measure, s, start, batch)
        if dense is not None and dense_t < best_t:
            best, best_t = dense, dense_t
    if s.grid_order:
        best, best_t = grid_order_trials(shape, measure, best, best_t)
    if s.final_tile_pass:
        best, best_t = tile_pass(shape, measure, s, best, best_t)
    return best


def _timed_once(measure):
    """measure, remembering each knob set's time: the search's steps reach some sets twice (a
    BLOCK_M trial with the current tile, a '-qo' / '-qs' tile made plain on a GEMM that sums)."""
    times = {}

    def once(knobs):
        key = tuple(sorted(knobs.items()))
        if key not in times:
            times[key] = measure(knobs)
        return times[key]
    return once


def dense_dept_trials(measure, s: "MicrobenchSettings", start: dict, batch: int | None):
    """DeaMoE only (the baseline's w13 needs its routing): the department up-projection for
    every token, beside the routing, with each split value; then its own BLOCK_M with each
    dept_up tile (a taller block needs a smaller tile, and the dense GEMM runs beside the
    routing, so its best shape differs from the routed one's); then with s.dense_parts only the
    first parts dense, the others routed in their own chains (at 4-8 tokens the routed parts
    skip unchosen departments and start beside the dense tail): (best, its time) or Nones."""
    dense, dense_t = None, None
    for parts in dict.fromkeys([1, *s.split_launches]):
        trial = {**start, "dense_dept_up": 1}
        if parts > 1:
            trial["split_launches"] = parts
        t = measure(trial)
        if t is not None and (dense_t is None or t < dense_t):
            dense, dense_t = trial, t
    base = dict(dense or {**start, "dense_dept_up": 1})
    for bm in block_m_values(BLOCK_M_KNOBS["deamoe"]["dept_block_m"], batch):
        for tile in s.tiles:
            trial = {**base, "dense_block_m": bm, "dept_up": tile}
            if bm == base["dept_block_m"] and tile == base["dept_up"]:
                continue  # the trial above
            t = measure(trial)
            if t is not None and (dense_t is None or t < dense_t):
                dense, dense_t = trial, t
    if s.dense_parts and dense is not None:
        base = dense
        for n_dense in range(1, base.get("split_launches", 1)):
            trial = {**base, "dense_parts": n_dense}
            t = measure(trial)
            if t is not None and t < dense_t:
                dense, dense_t = trial, t
    return dense, dense_t


def grid_order_trials(shape, measure, best: dict, best_t: float):
    """The N-tile-fastest grid order (-nf) on every GEMM of the layer, then on its expert
    GEMMs only, each with the split found and with none (it streams a launch of many
    small experts 1.4-2.2% faster, and lost beside split launches): (best, its time)."""
    start = dict(best)
    for stages in dict.fromkeys([GEMM_STAGES[shape.kind], EXPERT_STAGES[shape.kind]]):
        for parts in dict.fromkeys([start.get("split_launches", 1), 1]):
            trial = {**start, **{g: _with_nf(start[g]) for g in stages}}
            if parts != start.get("split_launches", 1):
                trial["split_launches"] = parts
                trial.pop("dense_parts", None)  # a count of the split's parts
            if trial == start:
                continue
            t = measure(trial)
            if t is not None and t < best_t:
                best, best_t = trial, t
    return best, best_t


def _with_nf(tile: str) -> str:
    return tile if tile.endswith("-nf") else f"{tile}-nf"


def tile_pass(shape, measure, s: "MicrobenchSettings", best: dict, best_t: float):
    """One coordinate pass over each GEMM's tile from `best`, each GEMM keeping its grid order
    (-nf or not): (best, its time)."""
    for stage in GEMM_STAGES[shape.kind]:
        for value in s.tiles:
            value = on_stage(stage, value)
            if best[stage].endswith("-nf"):
                value = _with_nf(value)
            if value == best[stage]:
                continue
            trial = {**best, stage: value}
            t = measure(trial)
            if t is not None and t < best_t:
                best, best_t = trial, t
    return best, best_t


def search_point(shape, measure, s: "MicrobenchSettings", batch: int | None = None,
                 prior: list[dict] | None = None, final_measure=None, qout: bool = False):
    """The knobs one point reports: search_tiles, then the best of its finalists re-timed
    (measure(knobs, replays=s.select_replays) -> median us or None).  final_measure(knobs) ->
    us or None times the finalists; by default measure(knobs, s.replays).  The microbenchmark
    passes the reported time's own measure: a graph of >= min_layers_per_graph layer steps
    (on Qwen3 the search's one-layer graphs ranked two dense department tiles the other
    way round).  prior: the knobs earlier runs picked for this point, each always a finalist
    (a search can lose a pick it had to a candidate that won its few-replay trials by
    noise).  qout: the layer's activations are quantised (w8a8), so pair_dept_down_pass also
    tries expert_down storing its rows quantised."""
    tried = []

    def logged(knobs):
        t = measure(knobs)
        if t is not None:
            tried.append((t, knobs))
        return t

    knobs = search_tiles(shape, logged, s, batch)
    # a previous pick that no longer runs is no candidate
    must = [k for k in prior or [] if logged(k) is not None]
    # each knob set once: the passes after the finalists start from the pick they timed
    final = _timed_once(final_measure or (lambda k: measure(k, s.replays)))
    pick = pick_finalist(tried, s.finalists, final, must) or knobs
    pick = dense_parts_pass(shape, pick, final, s)
    pick = dense_up_cublas_pass(shape, pick, final, s, qout)
    return pair_dept_down_pass(shape, pick, final, s, qout)


def dense_parts_pass(shape, pick: dict | None, measure, s: "MicrobenchSettings"):
    """The pick and its 1..n-1 dense parts (at its split n), timed by the final measure: the
    fastest.  DeaMoE picks with dense_dept_up and a split only (at Qwen3 @4 the search's
    one-layer trials did not rank 3 of 4 parts dense among its finalists, which the A/B on >= 8-layer
    graphs timed 0.5% faster in every round)."""
    split = (pick or {}).get("split_launches", 1)
    if not (s.dense_parts and shape.kind == "deamoe" and pick and pick.get("dense_dept_up")
            and split > 1):
        return pick
    plain = {k: v for k, v in pick.items() if k != "dense_parts"}
    candidates = [plain] + [{**plain, "dense_parts": n} for n in range(1, split)]
    return _fastest(candidates, measure, pick)


def dense_up_cublas_pass(shape, pick: dict | None, measure, s: "MicrobenchSettings",
                         qout: bool = False):
    """w8a8 (qout): a DeaMoE pick with the dense department up-projection and no dense parts,
    and the same with that GEMM through cuBLAS (kernels.fp8_dense_up), timed by the final
    measure: the faster.  A tile cannot beat cuBLAS there at >= 128 tokens (the GEMMs alone,
    docs/kernels-fp8.md), nor cuBLAS the tiles at <= 64, so it is tried per point."""
    if not (s.dense_up_cublas and qout and shape.kind == "deamoe" and pick
            and pick.get("dense_dept_up") and not pick.get("dense_parts")):
        return pick
    plain = {k: v for k, v in pick.items() if k != "dense_up_cublas"}
    cublas = {**plain, "dense_up_cublas": 1}
    # not with a dept_up tile that stores its output quantised or with its absmax
    return _fastest([plain] + [cublas] * _runs(shape, cublas), measure, pick)


def pair_dept_down_pass(shape, pick: dict | None, measure, s: "MicrobenchSettings",
                        qout: bool = False):
    """DeaMoE: the pick, the pick with pair_dept_down, and (qout) with it and expert_down's rows
    stored quantised ('-qo', where the pick's tiles can take it), timed by the final measure: the
    fastest.  The point is w8a8's quantiser launch over S before dept_down, which '-qo' removes
    (an H100 A/B on the FP8 picks: Qwen3 @4 1.2% faster; 0.3-2.5% slower at >= 64 tokens,
    where dept_down reads k_expert rows a token instead of k_dept), so it is tried per point."""
    if not (s.pair_dept_down and shape.kind == "deamoe" and pick):
        return pick
    plain = {k: v for k, v in pick.items() if k != "pair_dept_down"}
    paired = {**plain, "pair_dept_down": 1}
    candidates = [plain, paired]
    if qout:
        tile = dataclasses.replace(TileConfig.parse(plain["expert_down"]), qout=True).name
        quantised = {**paired, "expert_down": tile}
        # dept_down's BLOCK_K must divide the groups expert_down stores (its BLOCK_N)
        candidates += [quantised] * _runs(shape, quantised)
    return _fastest(candidates, measure, pick)


def _runs(shape, knobs: dict) -> bool:
    """Whether the layer of `shape` takes these knobs (a candidate of a pass)."""
    from deamoe.decode.knobs import make_tiles

    try:
        make_tiles(shape, knobs)
    except ValueError:
        return False
    return True


def _fastest(candidates: list[dict], measure, pick):
    """The candidate `measure` times fastest (None: it did not run); `pick` if none ran."""
    timed = [(t, i) for i, k in enumerate(candidates) if (t := measure(k)) is not None]
    return candidates[min(timed)[1]] if timed else pick


def pick_finalist(tried: list[tuple[float, dict]], n: int, measure,
                  must: list[dict] | None = None):
    """The fastest of the search's n best distinct candidates (and those in `must`), each
    re-timed with the full replay count: a candidate timed with few replays can win the search
    by noise (a DeepSeek-V3 @8 pick was 1.3% slower than the A/B's knobs).  The
    reported time is a fresh run of the pick afterwards, so choosing by these timings does not
    bias it."""
    best = []
    for knobs in must or []:
        if knobs not in best:
            best.append(knobs)
    n_must = len(best)
    for _, knobs in sorted(tried, key=lambda r: r[0]):
        if len(best) == n + n_must:
            break
        if knobs not in best:
            best.append(knobs)
    if len(best) < 2:
        return best[0] if best else None
    timed = [(measure(k), i) for i, k in enumerate(best)]
    timed = [(t, i) for t, i in timed if t is not None]
    return best[min(timed)[1]] if timed else best[0]


def prior_picks(paths: list[str], model: str, kind: str,
                precision: str = "bf16") -> dict[int, list[dict]]:
    """{batch: [knobs, ...]} of one layer kind ("baseline" / "deamoe") of `model` in these
    microbench.csv tables (each distinct pick once, in the order of the tables; none for a
    model a table lacks; rows whose tile is "failed" are skipped), of the rows of one weight
    precision (a table's `weight_dtype` column, microbench_fp8.csv; without it: bf16)."""
    import pandas as pd

    picks: dict[int, list[dict]] = {}
    for path in paths:
        table = pd.read_csv(path)
        dtype = table["weight_dtype"] if "weight_dtype" in table else pd.Series("bf16", table.index)
        rows = table[(table.model == model) & (dtype == precision)]
        for b, t in zip(rows.batch, rows[f"{kind}_tile"]):
            if isinstance(t, str) and t != "failed":
                knobs = parse_knobs(t)
                if knobs not in picks.setdefault(int(b), []):
                    picks[int(b)].append(knobs)
    return picks
