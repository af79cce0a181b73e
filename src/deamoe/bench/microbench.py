"""Per-layer decode microbenchmark (Figures 4/5): baseline fused MoE vs DeaMoE on one GPU.

For every (model, batch): router + routing + expert kernels of one layer, bf16 (and, with
microbench.weight_dtype, block-scaled FP8 FFN weights: deamoe.kernels.fp8), random weights,
CUDA graph, weights of several layer copies rotated so a replay reads far beyond L2.  Both
implementations run the same grouped-GEMM primitive and get the same tile search (each candidate
timed briefly on one pass over the layer copies, the best few re-timed on the reported graph of
>= min_layers_per_graph layer steps, the pick then timed afresh for the reported median).  Every
layer step has its own random input, redrawn before each replay (routing_draws draws), so a time
averages many routings as vLLM's benchmark_moe does.  Bytes are the weights those
routings must load (router + distinct experts, or + distinct departments; their mean); achieved
TB/s is compared with the streaming-read roofline measured in the same run.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from deamoe.bench.layer_step import (StepInputs, free_cuda_cache, layer_bytes, layer_steps,
                                     router_logits, step_bytes, time_fn)
from deamoe.bench.search import search_point
from deamoe.bench.settings import MicrobenchSettings
from deamoe.bench.points import LAYERS, PointStore, layer_label, point_settings, split_label
from deamoe.bench.shared import prior_for, shared_schedule
from deamoe.decode.knobs import fit_knobs, knobs_name, make_tiles, parse_knobs
from deamoe.decode.step import routing_label, step_routing
from deamoe.decode.weights import random_weights
from deamoe.kernels.gemm_spec import shared_memory_limit
from deamoe.shapes import table1_row
from deamoe.routing import route



def layer_copies(shape, s: MicrobenchSettings, device="cuda", fp8=None) -> list[dict]:
    """Random weights of enough layer copies that one replay reads >= rotate_bytes (beyond L2);
    fp8 (an Fp8Format): the FFN matrices block-quantised (the same bf16 draws)."""
    copies = max(1, min(s.max_copies, math.ceil(s.rotate_bytes / layer_bytes(shape, fp8))))
    return [random_weights(shape, device, seed=s.seed + 100 * c, fp8=fp8) for c in range(copies)]


def graph_repeats(copies: int, s: MicrobenchSettings) -> int:
    """Passes over the layer copies in a reported time's graph: >= min_layers_per_graph steps
    (a model's decode graph shares one launch among its layers: a graph launch costs 2.4-6.5 us
    on the H200, which a one-layer graph -- Qwen3's 4.8 GB layer -- charged to that layer)."""
    return max(1, math.ceil(s.min_layers_per_graph / copies))


def point_inputs(shape, weights: list[dict], batch: int, s: MicrobenchSettings, device="cuda",
                 fp8=None):
    """(inputs, bytes, experts) of one batch size.  inputs: StepInputs with one input per layer
    step of the reported graph (step j on copy j % copies) and s.routing_draws draws of them,
    a fresh draw before every replay (vLLM's benchmark_moe draws a new gating output per
    replay, so its times average many routings).  bytes / experts: the weight bytes
    and distinct experts a step must load (in `fp8`'s format where given), the mean over every
    draw and step."""
    steps = len(weights) * graph_repeats(len(weights), s)
    gen = torch.Generator(device=device).manual_seed(s.seed + batch)
    draws = [[torch.randn(batch, shape.h, generator=gen, device=device, dtype=torch.bfloat16)
              for _ in range(steps)] for _ in range(s.routing_draws)]
    nbytes = experts = 0
    with torch.no_grad():  # the routings the timed steps will compute: count their bytes
        for xs in draws:
            for logits in router_logits(weights, xs):
                ids = route(shape, logits)[0]
                nbytes += step_bytes(shape, ids, fp8)
                experts += int(torch.unique(ids).numel())
    n = steps * len(draws)
    return StepInputs([x.clone() for x in draws[0]], draws), nbytes / n, experts / n


def step_logits(weights: list[dict], inputs: StepInputs) -> StepInputs:
    """Every draw's router logits of each layer step (step j on copy j % copies), rotating with
    `inputs` (prepare both alike): the input of a step timed from the logits."""
    with torch.no_grad():
        return inputs.map(lambda j, x: router_logits([weights[j % len(weights)]], [x])[0])


def committed_points(points: list[str], s: MicrobenchSettings,
                     table: str = "reports/measured/h200/microbench.csv", device="cuda",
                     shapes=table1_row, kinds=("baseline", "deamoe"), fp8=None):
    """For the tools that re-time committed picks (A/B of one change): for each 'MODEL:BATCH'
    point, the baseline layer then the DeaMoE one, yield (model, shape, weights, batch, knobs,
    inputs, nbytes) -- the layer copies made once per model and kind, the knobs that table
    picked, point_inputs' StepInputs (time with prepare=inputs.prepare, as time_knob_sets).
    shapes(model) -> an object with .baseline / .deamoe layer shapes (Table 1 by default);
    kinds: which of the two layers to yield.  fp8 (an Fp8Format): the layers on FP8 weights,
    the knobs of the table's rows of that precision where it has a weight_dtype column, else
    its bf16 picks with each BLOCK_K fitted to the scale blocks (fit_knobs: a launch refuses a
    tile that does not fit them)."""
    import pandas as pd

    picks = pd.read_csv(table)
    own = "weight_dtype" in picks  # rows of each precision; without the column: bf16 picks
    if own:
        picks = picks[picks["weight_dtype"] == (fp8.precision if fp8 else "bf16")]
    parsed = [(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in points]
    for model in dict.fromkeys(m for m, _ in parsed):
        row = shapes(model)
        for kind in kinds:
            shape, col = getattr(row, kind), f"{kind}_tile"
            weights = layer_copies(shape, s, device, fp8)
            for batch in [b for m, b in parsed if m == model]:
                sel = picks[(picks.model == model) & (picks.batch == batch)].iloc[0]
                inputs, nbytes, _ = point_inputs(shape, weights, batch, s, device, fp8)
                knobs = parse_knobs(sel[col])
                yield (model, shape, weights, batch, knobs if own else fit_knobs(shape, knobs, fp8),
                       inputs, nbytes)
            del weights
            free_cuda_cache()


def time_knob_sets(shape, weights, inputs: StepInputs, sets: dict, s: MicrobenchSettings,
                   rounds: int = 2, replays: int = 50, label: str = "") -> dict:
    """{name: [median us per round]} for each named knob set of one point (A/B tools): every
    round times each set once, in turn, so slow drifts hit all alike; a graph of >=
    s.min_layers_per_graph layer steps on point_inputs' rotating draws, as bench_impl times.
    A set that fails gets NaN and a printed line."""
    repeats = graph_repeats(len(weights), s)
    runs = {name: [] for name in sets}
    for _ in range(rounds):
        for name, knobs in sets.items():
            try:
                fn = layer_steps(shape, weights, inputs.live, make_tiles(shape, knobs), repeats)
                runs[name].append(time_fn(fn, replays, repeats * len(weights),
                                          prepare=inputs.prepare).median_us)
            except Exception as exc:  # noqa: BLE001 - a set that fails is reported, not fatal
                print(f"{label} {shape.kind} {name}: {type(exc).__name__}: {exc}"[:300])
                runs[name].append(float("nan"))
    return runs


def bench_impl(shape, batches, s: MicrobenchSettings, device="cuda", impl="triton",
               on_point=None, prior: dict[int, list[dict]] | None = None, fp8=None):
    """Rows {batch, us, bytes, tile, ...} for one implementation of one layer shape; prior:
    {batch: [knobs, ...]} earlier runs picked (finalists of the search, see search_point).
    on_point(row, stage_rows), if given, gets each batch's row (and its per-GEMM breakdown at
    s.stage_batches) as soon as it is measured.  Knob sets whose shared memory (the estimate
    of MoETiles / DeaMoETiles.shared_memory) exceeds the device's are skipped uncompiled
    (`smem_skipped` counts them).  fp8 (an Fp8Format): the layer on block-scaled FP8 weights,
    searched over s.fp8_tiles (its bytes: the FP8 weights and their scales)."""
    if not batches:  # every point already measured: no layer copies to make
        return []
    if fp8 is not None:
        s = s.searching(fp8.precision)  # the same search, over the FP8 tiles
    weights = layer_copies(shape, s, device, fp8)
    copies = len(weights)
    repeats = graph_repeats(copies, s)  # the reported time's graph: >= min_layers_per_graph steps
    limit = shared_memory_limit(device)
    rows = []
    for batch in batches:
        inputs, nbytes, experts = point_inputs(shape, weights, batch, s, device, fp8)
        too_large: set[str] = set()

        def runner(tiles, repeat=1, shared=None):
            return layer_steps(shape, weights, inputs.live, tiles, repeat, impl, shared=shared)

        def measure(knobs, replays=s.select_replays, repeat=1):
            try:
                tiles = make_tiles(shape, knobs)
                if limit is not None and tiles.shared_memory(2, fp8) > limit:
                    too_large.add(knobs_name(knobs))  # would fail to compile: not tried
                    return None
                return time_fn(runner(tiles, repeat), replays, copies * repeat,
                               prepare=inputs.prepare).median_us
            except Exception as exc:  # noqa: BLE001 - a tile that fails to compile is skipped
                print(f"  {shape.kind} batch {batch} {knobs_name(knobs)}: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:160]}")
                return None

        if impl == "triton":  # the search's trials on one pass over the copies (cheap); its
            # finalists on the reported time's graph of >= min_layers_per_graph steps (one-layer
            # graphs ranked two of Qwen3's dense department tiles the other way round)
            knobs = search_point(shape, measure, s, batch, (prior or {}).get(batch),
                                 final_measure=lambda k: measure(k, s.replays, repeats),
                                 qout=fp8 is not None and fp8.activations == "fp8")
            run, shared_stream = shared_schedule(shape, lambda sh: runner(
                make_tiles(shape, knobs), repeats, sh), s, copies * repeats, inputs, knobs)
            tile = knobs_name(knobs) if knobs else "failed"
        else:
            run, tile, shared_stream = runner(None, repeats), "library", None
        final = None
        if run is not None:
            try:
                final = time_fn(run, s.replays, copies * repeats, prepare=inputs.prepare)
            except Exception as exc:  # noqa: BLE001
                print(f"  {shape.kind} {impl} batch {batch}: {type(exc).__name__}: {exc}")
        row = {"batch": batch, "us": float("nan"), "bytes": nbytes, "tile": "failed",
               "experts": experts, "copies": copies, "layers": copies * repeats,
               "smem_skipped": len(too_large)}
        stages = []
        if final is not None:
            row.update(us=final.median_us, p10_us=final.p10_us, p90_us=final.p90_us, tile=tile,
                       shared_stream=shared_stream,
                       from_logits_us=_from_logits_us(shape, weights, inputs, knobs, repeats, s)
                       if impl == "triton" and shape.kind == "moe" else float("nan"))
            if impl == "triton" and batch in s.stage_batches:
                stages = [{"kind": shape.kind, "batch": batch,
                           **({"weight_dtype": fp8.precision} if fp8 else {}), **r}
                          for r in _stage_breakdown(shape, weights[0], inputs.live[0],
                                                    make_tiles(shape, knobs))]
        rows.append(row)
        if on_point is not None:
            on_point(row, stages)
    del weights
    free_cuda_cache()
    return rows


def _from_logits_us(shape, weights, inputs: StepInputs, knobs, repeats: int,
                    s: MicrobenchSettings) -> float:
    """The baseline step on its picked tiles with the router logits given (routing, align,
    GEMMs; no router GEMM): how vLLM's fused_moe is timed, from the gating output, so the peer
    comparison is like for like.  The logits of every draw are computed beforehand and rotate
    with the inputs.  NaN (and a printed line) if it fails."""
    logits = step_logits(weights, inputs)

    def prepare(i):
        inputs.prepare(i)
        logits.prepare(i)
    fn = layer_steps(shape, weights, inputs.live, make_tiles(shape, knobs), repeats,
                     logits=logits.live)
    try:
        return time_fn(fn, s.replays, len(weights) * repeats, prepare=prepare).median_us
    except Exception as exc:  # noqa: BLE001 - a diagnostic column, not the reported time
        print(f"  {shape.kind} from logits: {type(exc).__name__}: {exc}"[:300])
        return float("nan")


def _stage_breakdown(shape, w, x, tiles) -> list[dict]:
    tiles = dataclasses.replace(tiles, split_launches=1)  # each GEMM timed alone
    if shape.kind == "deamoe":
        tiles = dataclasses.replace(tiles, dense_dept_up=False, dense_parts=0, dense_up_cublas=False)
    from deamoe.kernels.deamoe_decode import DeaMoEWeights, deamoe_stages
    from deamoe.kernels.fused_moe import fused_moe_stages
    from deamoe.kernels.grouped_gemm import output_dtype
    from deamoe.kernels.stage_benchmark import stage_times

    # what sits outside the kernels: router GEMM + deamoe.routing.route, and the final cast
    # where the layer sums its output in fp32 (none when it sums in x's dtype: tiles.out_bf16)
    parts = [("router+route", lambda: step_routing(shape, w, x))]
    if output_dtype(x, tiles.out_bf16) != x.dtype:
        parts.append(("cast", lambda: torch.empty(x.shape, dtype=torch.float32,
                                                  device=x.device).to(x.dtype)))
    fixed = []
    for name, fn in parts:
        try:
            t = time_fn(fn, 30)
            fixed.append({"stage": name, "us": t.median_us, "bytes": 0, "tbps": float("nan")})
        except Exception as exc:  # noqa: BLE001 - diagnostic only
            print(f"  {name} timing failed: {type(exc).__name__}: {exc}")

    with torch.no_grad():
        ids, weights = route(shape, torch.nn.functional.linear(x, w["router"]))
        if shape.kind == "deamoe":
            _, stages = deamoe_stages(x, DeaMoEWeights.of(w), ids, weights, shape.operator,
                                      tiles)
            per = shape.experts_per_dept
            groups = {"dept_up": per, "dept_down": per, "expert_up": 1, "expert_down": 1}
        else:
            _, stages = fused_moe_stages(x, w["gate_proj"], w["up_proj"], w["down_proj"], ids,
                                         weights, tiles)
            groups = {"w13": 1, "w2": 1}
        try:
            return fixed + stage_times(stages, ids, groups)
        except Exception as exc:  # noqa: BLE001 - the breakdown is diagnostic only
            print(f"  stage breakdown failed: {type(exc).__name__}: {exc}")
            return fixed


def run_microbench(s: MicrobenchSettings, peak_read_tbps: float, device="cuda",
                   store: PointStore | None = None) -> list[dict]:
    """The microbench.csv rows (one per model and batch of s; the FP8 precisions' rows of
    s.weight_dtype: store.fp8_table, microbench_fp8.csv).  Each layer point (model, layer,
    batch) is measured once: those already in `store` (a stopped run's, PointStore.open) are
    taken from it, each new one goes into it as it finishes (and out to its folder, if it has
    one) with one progress line: best time, fraction of the read roofline, and for DeaMoE the
    speedup as a fraction of the ideal."""
    import time

    import triton

    from deamoe.provenance import provenance

    prov = provenance(device)
    measured = {"peak_read_tbps": peak_read_tbps, "routing": routing_label(device),
                "gpu": prov["device"], "torch": prov["torch"], "triton": triton.__version__,
                "date": prov["date"], "git_sha": prov["git_sha"]}
    store = store if store is not None else PointStore(point_settings(s))
    layers = [layer_label(layer, p) for p in s.weight_dtype
              for layer in (LAYERS if s.torch_reference and p == "bf16" else LAYERS[:2])]
    plan = [(m, layer, b) for m in s.models for layer in layers for b in s.batches]
    t0, done = time.time(), [sum(p in store.points for p in plan)]
    if done[0]:
        print(f"microbench: {done[0]} of {len(plan)} points measured before, in "
              f"{store.source}", flush=True)
    for model in s.models:
        row = table1_row(model)
        for layer in layers:
            kind, precision = split_label(layer)
            shape = row.deamoe if kind == "deamoe" else row.baseline

            def finished(point, stage_rows, model=model, layer=layer):
                point = {"model": model, "layer": layer, **point, **measured}
                store.add(point, [{"model": model, **r} for r in stage_rows])
                done[0] += 1
                print(store.progress_line(point, f"{done[0]}/{len(plan)} points, "
                                                 f"{time.time() - t0:.0f} s"), flush=True)

            bench_impl(shape, [b for b in s.batches if (model, layer, b) not in store.points], s,
                       device, impl="torch" if kind == "torch" else "triton", on_point=finished,
                       prior=None if kind == "torch" else prior_for(s.prior_picks, model, kind,
                                                                    precision),
                       fp8=s.fp8_format(precision))
    return store.table(s.models, s.batches)
