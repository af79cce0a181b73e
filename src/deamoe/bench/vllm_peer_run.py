"""`python -m deamoe bench peer run`: vLLM's fused MoE timed beside our baseline on one GPU.

  bench peer run OUT_DIR MODEL:BATCH ... [--kernel FILE] [--table CSV] [--rounds 2]
      CUDA: for each point, on the same layer copies and the same rotating routings
      (point_inputs), interleaved rounds of
        ours logits   our baseline on its committed tiles from the router logits (routing,
                      align, GEMMs): how vLLM's own benchmark times its fused MoE (gating
                      output in)
        ours routed   the same with ids and weights given: align + GEMMs
        vllm routed   vLLM's fused_experts path for bf16 with ids and weights given and its
                      block alignment computed beforehand (outside the timed graph): w13 GEMM,
                      SiLU*up, w2 GEMM weighted by the routing weights, sum over k -- vLLM's
                      kernel and default config (no tuned file exists for these shapes), its
                      naive block assignment where vLLM takes it, a one-launch Triton SiLU*up
                      and torch.sum standing in for vLLM's CUDA silu_and_mul and moe_sum
      "vllm routed" leaves out vLLM's routing and alignment launches, so it is a lower bound
      on vLLM's time from routed ids: our "ours routed" pays its own align launch.  A
      "<model>+shared" point adds the layer's shared experts on both sides: ours on the
      schedule its table picked (`baseline_shared_stream`: in line or on a side stream),
      vLLM's shared-expert MLP on its aux stream beside the fused MoE, then its add
      (deamoe.bench.vllm_peer.VllmSharedMLP); the table must hold that point (the
      microbenchmark's run of the "+shared" layers, reports/measured/h200/microbench_shared.csv).
      With --weight-dtype fp8 / fp8-w8a8 (deamoe.kernels.fp8): the same points once more on
      block-scaled FP8 weights -- ours on the FP8 table's pick (microbench_fp8.csv beside
      --table; else the bf16 pick fitted to the scale blocks), vLLM on its FP8 block path
      (deamoe.bench.vllm_peer_fp8: use_fp8_w8a8, block_shape [128, 128], activations quantised
      per token group before each GEMM); every row carries weight_dtype and vllm_path.
      Writes vllm_peer.csv (rewritten after each point) and roofline.json under OUT_DIR.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from deamoe.bench.vllm_peer import (PeerError, VllmMoE, assignment_like_vllm, config_name,
                                    load_peer)
from deamoe.errors import not_a_file
from deamoe.kernels.fp8 import is_fp8
from deamoe.shapes import SHARED_SUFFIX, MoEShape

# every model of a --tiny run becomes this layer (fp16, default tiles), with the model's
# shared experts
TINY_SHAPE = MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2)
VARIANTS = ("ours logits", "ours routed", "vllm routed")


@dataclass
class PeerPoint:
    """One point's result: {variant: [us per round]}, the peer's relative error against ours,
    the mean distinct experts, vLLM's tile config name, our shared experts' schedule, the layer
    copies each graph rotated."""

    times: dict
    rel: float
    experts: float
    peer_tile: str
    shared_stream: bool | None
    copies: int
    precision: str = "bf16"  # the weights' (deamoe.kernels.fp8.PRECISIONS)


def checked_points(points: list[str], table, precision: str = "bf16") -> dict[tuple[str, int], dict]:
    """{(model, batch): the table's row} of every 'MODEL:BATCH' point, before any GPU work; a
    PeerError naming the point, or the table and the row it lacks.  precision: the rows of
    that weight precision (a table's `weight_dtype`; a table without it holds bf16 rows)."""
    from deamoe.readers import TableSpec, read_table
    from deamoe.table_specs import POINT
    from deamoe.shapes import table1_row

    if not Path(table).is_file():
        raise PeerError(f"--table: {table}: {not_a_file(table)}")
    df = read_table(table, TableSpec(("model", "batch", "baseline_tile"), finite=("batch",), key=POINT),
                    "microbench.csv")
    every = df
    df = df[df["weight_dtype"] == precision] if "weight_dtype" in df else df
    rows = {}
    for point in points:
        model, sep, batch = point.rpartition(":")
        if not sep or not batch.isdigit() or int(batch) < 1:
            raise PeerError(f"point {point!r}: expected MODEL:BATCH (e.g. DeepSeek-V3:16)")
        table1_row(model)  # an unknown model: its one-line error naming the presets
        if (model, int(batch)) in rows:  # timed twice, its rows twice in the table
            raise PeerError(f"point {point!r} is given twice; name each MODEL:BATCH once")
        sel = df[(df["model"] == model) & (df["batch"] == int(batch))]
        if sel.empty:
            hint = (" (the '+shared' layers' table: reports/measured/h200/microbench_shared.csv)"
                    if model.endswith(SHARED_SUFFIX) else "")
            of = ""
            if "weight_dtype" in every:  # a row of another precision is no row of this one
                others = every[(every["model"] == model) & (every["batch"] == int(batch))]
                of = f" of weight_dtype {precision}" + (
                    f" (it has {', '.join(sorted(others['weight_dtype'].astype(str)))})"
                    if len(others) else "")
            raise PeerError(f"{table}: no row for {model} batch {batch}{of}; --table names the "
                            f"microbench.csv that measured it{hint}")
        rows[(model, int(batch))] = sel.iloc[0].to_dict()
    return rows


def pick_table(points: list[str], table, precision: str):
    """(the table whose baseline picks the points of `precision` run on, its rows): bf16's
    `table`; an FP8 precision's own rows in microbench_fp8.csv beside it where that has them
    all, else `table`'s bf16 picks (fitted to the scale blocks when run)."""
    from deamoe.bench.points import FP8_FILE

    fp8_table = Path(table).with_name(FP8_FILE)
    if precision != "bf16" and fp8_table.is_file():
        try:
            return fp8_table, checked_points(points, fp8_table, precision)
        except PeerError:
            if not Path(table).is_file():
                raise
    return Path(table), checked_points(points, table)


def _peer_shapes(tiny: bool):
    """shapes(model) for committed_points: Table 1's, or TINY_SHAPE with the model's shared
    experts (a small layer the interpreter runs)."""
    from types import SimpleNamespace

    from deamoe.shapes import table1_row

    if not tiny:
        return table1_row
    return lambda model: SimpleNamespace(
        baseline=TINY_SHAPE.replace(n_shared=table1_row(model).baseline.n_shared))


def _peer_settings(settings, tiny: bool):
    """The microbenchmark's settings the points are timed with (layer copies, draws, seed):
    the run's own, MicrobenchSettings() by default; --tiny: a few small copies, 2 draws."""
    from deamoe.bench.microbench import MicrobenchSettings

    if tiny:
        return MicrobenchSettings(rotate_bytes=1e5, max_copies=2, min_layers_per_graph=3,
                                  routing_draws=2, fp8_block=[32, 32])
    return settings or MicrobenchSettings()


def shared_tiles(shape, row: dict, block_m: int):
    """Our shared experts' SharedTiles for a point, on the schedule its table picked (None for a
    layer without shared experts; in line where the table names none)."""
    from deamoe.kernels.shared_expert import SharedTiles

    if not shape.n_shared:
        return None
    return SharedTiles(block_m=block_m, stream=str(row.get("baseline_shared_stream")) == "True")


def _point_routings(shape, inputs, logits, moes):
    """Every draw's routing, computed before the capture: (ours, the peer's inputs, the mean
    distinct experts as point_inputs counts them, whether vLLM takes its naive assignment)."""
    from deamoe.bench.layer_step import StepInputs
    from deamoe.routing import route

    routed, peer_in, experts = [], [], 0
    with torch.no_grad():
        for d in logits.draws:
            r, p = [], []
            for lg in d:
                ids, wts = route(shape, lg)
                experts += int(torch.unique(ids).numel())
                r += [ids, wts]
                p += [wts.float().contiguous(),
                      *assignment_like_vllm(ids, moes[0].config, shape.n_expert)]
            routed.append(r)
            peer_in.append(p)
    experts /= len(routed) * len(inputs.live)
    naive = peer_in[0][1] is None
    if naive:  # sorted_token_ids None: drop it from the rotated tensors
        peer_in = [[t for t in p if t is not None] for p in peer_in]
    return (StepInputs([t.clone() for t in routed[0]], routed),
            StepInputs([t.clone() for t in peer_in[0]], peer_in), experts, naive)


def _time_point(shape, weights, inputs, logits, moes, tiles, repeats, rounds, replays,
                shared=None):
    """({variant: [us per round]}, the peer's relative error against ours, distinct experts,
    naive) for one point: the three variants interleaved, round after round; shared: our
    shared experts' SharedTiles (a layer with shared experts)."""
    from deamoe.bench.layer_step import layer_steps, time_fn
    from deamoe.decode.step import ffn_step

    n, steps = len(weights), len(inputs.live)
    routed, peer_in, experts, naive = _point_routings(shape, inputs, logits, moes)
    per = 3 if naive else 4

    def peer_args(i):
        a = peer_in.live[per * i: per * (i + 1)]
        return (a[0], None, a[1], a[2]) if naive else tuple(a)

    def vllm_steps():
        for j in range(repeats * n):
            i = j % steps
            moes[j % n](inputs.live[i], *peer_args(i))

    pairs = [(routed.live[2 * i], routed.live[2 * i + 1]) for i in range(steps)]
    fns = {
        "ours logits": (layer_steps(shape, weights, inputs.live, tiles, repeats,
                                    logits=logits.live, shared=shared), (inputs, logits)),
        "ours routed": (layer_steps(shape, weights, inputs.live, tiles, repeats,
                                    routed=pairs, shared=shared), (inputs, routed)),
        "vllm routed": (vllm_steps, (inputs, peer_in)),
    }
    # same routing, same input: the peer's output against ours (fp32 norms)
    for src in (inputs, routed, peer_in):
        src.prepare(0)
    ours = ffn_step(shape, weights[0], inputs.live[0], tiles=tiles, routed=pairs[0],
                    shared=shared).float()
    theirs = moes[0](inputs.live[0], *peer_args(0)).float()
    rel = ((theirs - ours).norm() / ours.norm()).item()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, (fn, srcs) in fns.items():
            def prepare(i, srcs=srcs):
                for src in srcs:
                    src.prepare(i)
            times[name].append(time_fn(fn, replays, repeats * n, prepare=prepare).median_us)
    return times, rel, experts, naive


def _peer_roofline(out: Path, prov: dict, peak, tiny: bool) -> float:
    """The read roofline the rows are compared with: `peak` if given, else measured here."""
    from deamoe.io import write_json
    from deamoe.kernels.stream_read_benchmark import measure_read_roofline

    if peak is None and not tiny:
        roof = measure_read_roofline(4.0)
        peak = roof["peak_read_tbps"]
        write_json(out / "roofline.json", {**roof, **prov})
        print(f"read roofline {peak:.3f} TB/s", flush=True)
    return float("nan") if peak is None else peak


def time_peer_point(peer, shape, weights, batch: int, tiles, inputs, s, rounds: int,
                    replays: int, shared=None) -> PeerPoint:
    """vLLM's layer (with its shared-expert MLP where the shape has shared experts) on every
    layer copy, timed beside ours (_time_point); on FP8 weights (Fp8Weight stacks), vLLM's FP8
    block path (deamoe.bench.vllm_peer_fp8.VllmFp8MoE)."""
    from deamoe.bench.microbench import graph_repeats, step_logits
    from deamoe.bench.vllm_peer_fp8 import VllmFp8MoE

    def peer_shared(w):
        return (w["shared_gate"], w["shared_up"], w["shared_down"]) if shape.n_shared else None

    fp8 = is_fp8(weights[0]["gate_proj"])
    layer = VllmFp8MoE if fp8 else VllmMoE
    moes = [layer(peer, w["gate_proj"], w["up_proj"], w["down_proj"], batch, shape.k_expert,
                  peer_shared(w)) for w in weights]
    times, rel, experts, naive = _time_point(
        shape, weights, inputs, step_logits(weights, inputs), moes, tiles,
        graph_repeats(len(weights), s), rounds, replays, shared)
    tile = config_name(moes[0].config) + ("-naive" if naive else "")
    return PeerPoint(times, rel, experts, tile, None if shared is None else shared.stream,
                     len(weights), weights[0]["gate_proj"].fmt.precision if fp8 else "bf16")


def point_rows(model: str, batch: int, shape, p: PeerPoint, knobs_tile: str, nbytes: float,
               s, peak: float, prov: dict, vllm_kernel: str) -> list[dict]:
    """vllm_peer.csv's rows of one point, one per variant (its best round); n_shared and, for a
    layer with shared experts, our schedule of them (shared_stream)."""
    from deamoe.bench.microbench import graph_repeats

    rows = []
    for name, runs in p.times.items():
        us = min(runs)
        rows.append({
            "model": model, "batch": batch, "variant": name, "us": us,
            "runs": " ".join(f"{t:.1f}" for t in runs),
            "bytes": nbytes, "experts": p.experts, "tbps": nbytes / us / 1e6,
            "frac_peak": nbytes / us / 1e6 / peak, "peak_read_tbps": peak,
            "tile": p.peer_tile if name.startswith("vllm") else knobs_tile,
            "peer_rel_err": p.rel, "copies": p.copies,
            "layers_per_graph": graph_repeats(p.copies, s) * p.copies,
            "routing_draws": s.routing_draws, "vllm_kernel": vllm_kernel,
            # the same columns with and without shared experts (0 and empty without)
            "n_shared": shape.n_shared, "shared_stream": p.shared_stream if shape.n_shared else None,
            "gpu": prov["device"], "torch": prov["torch"], "triton": prov["triton"],
            "date": prov["date"], "git_sha": prov["git_sha"], **_fp8_columns(p)})
    return rows


def _fp8_columns(p: PeerPoint) -> dict:
    """A row's weight precision and the vLLM path timed beside it (every row has both, so a
    run's table has the committed one's columns whichever precisions it measured)."""
    from deamoe.bench.vllm_peer_fp8 import VLLM_PATH

    return {"weight_dtype": p.precision,
            "vllm_path": "fused_moe" if p.precision == "bf16" else VLLM_PATH}


def run_peer(kernel: Path, points: list[str], out: Path, table, rounds: int = 2,
             replays: int = 50, tiny: bool = False, peak: float | None = None,
             settings=None, precisions=("bf16",)) -> int:
    """Time each 'MODEL:BATCH' point (its baseline tile from `table`, a microbench.csv) as the
    module docstring says, in each weight precision of `precisions`; rows go to
    out/vllm_peer.csv as they finish.  peak: the read roofline measured earlier in the same run
    (else measured here, into out/roofline.json).  settings: the microbenchmark's (layer
    copies, draws, seed, FP8 block), so both sides are timed as the run's own table was;
    MicrobenchSettings() by default."""
    import pandas as pd
    import triton

    from deamoe.bench.microbench import committed_points
    from deamoe.decode.knobs import knobs_name, make_tiles
    from deamoe.io import write_csv
    from deamoe.kernels.fp8 import fit_tiles
    from deamoe.provenance import provenance

    tables = {p: pick_table(points, table, p) for p in precisions}  # bad points: named first
    shared = [p for p in points if p.rpartition(":")[0].endswith(SHARED_SUFFIX)]
    if shared and set(precisions) - {"bf16"}:
        raise PeerError(f"{', '.join(shared)}: the FP8 peer runs layers without shared experts")
    peer = load_peer(kernel)  # a missing or mistyped --kernel: named before the CUDA check too
    cuda = torch.cuda.is_available()
    if not cuda and not tiny:
        raise PeerError("bench peer run: needs a CUDA GPU (--tiny: a smoke test of this path "
                        "on the CPU, TRITON_INTERPRET=1)")
    out.mkdir(parents=True, exist_ok=True)
    prov = {**provenance("cuda" if cuda else "cpu"), "triton": triton.__version__}
    peak = _peer_roofline(out, prov, peak, tiny)
    s = _peer_settings(settings, tiny)
    rows = []
    for precision, (used, table_rows) in tables.items():
        fmt = s.fp8_format(precision)
        for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(
                points, s, str(used), "cuda" if cuda else "cpu", shapes=_peer_shapes(tiny),
                kinds=("baseline",), fp8=fmt):
            t0 = time.time()
            if tiny:  # fp16 copies (see vllm_peer.check_rows) on default tiles
                weights = [{k: v if is_fp8(v) else v.half() for k, v in w.items()}
                           for w in weights]
                inputs = inputs.map(lambda j, x: x.half())
                knobs = {}
            p = time_peer_point(peer, shape, weights, batch,
                                fit_tiles(make_tiles(shape, knobs), fmt), inputs, s, rounds,
                                replays, shared_tiles(shape, table_rows[(model, batch)], s.block_m))
            rows += point_rows(model, batch, shape, p, knobs_name(knobs) or "default", nbytes, s,
                               peak, prov, peer.VLLM_VERSION)
            ours_us, peer_us = min(p.times["ours routed"]), min(p.times["vllm routed"])
            print(f"{model:16s} {batch:4d} {precision:8s} logits "
                  f"{min(p.times['ours logits']):8.1f}  routed {ours_us:8.1f}  vllm "
                  f"{peer_us:8.1f} ({ours_us / peer_us:.3f})  {p.peer_tile}  rel {p.rel:.1e}  "
                  f"{time.time() - t0:.0f}s", flush=True)
            write_csv(out / "vllm_peer.csv", pd.DataFrame(rows))
            del weights
    return 0
