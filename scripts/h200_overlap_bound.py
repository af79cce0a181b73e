"""How much any schedule of a layer's GEMM launches could win: a measured bound (NOTES.md v32).

usage: python scripts/h200_overlap_bound.py OUT_DIR MODEL:BATCH [...]     (CUDA; see --help)
For each point, both layers on their committed tiles (reports/measured/h200/microbench.csv,
split_launches 1): the routing and align run once before the capture, so a graph holds only
GEMM launches (>= min_layers_per_graph layer steps over the rotated copies, as the
microbenchmark), arranged as
  DeaMoE   chain               dense dept_up -> expert_up -> expert_down -> dept_down
           dense|rest          the dense GEMM beside the other three (chained)
           dense>up|down|ddown the dense GEMM, then the other three side by side
           free                all four side by side
  baseline chain               w13 -> w2
           free                w13 beside w2
and, for scale, the whole committed layer (`layer`: router, routing, align, its streams, cast),
timed before the arrangements and again after them (`layer after`).
Every arrangement but `chain` drops dependencies the layer has, so its output is wrong; its
time is what a perfect schedule of these kernels (one fused launch with per-group readiness,
say) could approach.  Two interleaved rounds, the better kept -> overlap_bound.csv with the
GEMM bytes and TB/s.  --dry-run: small shapes on the CPU (TRITON_INTERPRET=1), to check the
plumbing.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from deamoe.analysis.budget import router_params
from deamoe.bench.layer_step import step_bytes, step_routing, time_fn
from deamoe.bench.knobs import make_tiles
from deamoe.bench.microbench import (MicrobenchSettings, committed_points, graph_repeats,
                                     point_parser, time_knob_sets)
from deamoe.kernels.align import dense_alignment
from deamoe.kernels.deamoe_decode import deamoe_stages, dept_up_gemm
from deamoe.kernels.fused_moe import fused_moe_stages
from deamoe.kernels.streams import run_parallel


def gemm_launches(shape, w: dict, x: torch.Tensor, tiles) -> dict:
    """{name: launch} of one layer copy's GEMMs, after routing + align + one run of each."""
    with torch.no_grad():
        ids, weights = step_routing(shape, w, x)
    tiles = dataclasses.replace(tiles, split_launches=1)
    if shape.kind == "moe":
        _, stages = fused_moe_stages(x, w["gate_proj"], w["up_proj"], w["down_proj"], ids,
                                     weights, tiles)
    else:  # the routed stages; the dense GEMM (as the layer runs it) added by hand
        _, stages = deamoe_stages(x, w["dept_gate"], w["dept_up"], w["dept_down"],
                                  w["expert_gate"], w["expert_up"], w["expert_down"], ids,
                                  weights, shape.operator, dataclasses.replace(tiles,
                                                                               dense_dept_up=False))
    for _, launch, _ in stages:  # align once, and fill every intermediate with real values
        launch()
    launches = {name: launch for name, launch, _ in stages if name not in ("align", "dept_up")}
    if shape.kind == "deamoe":
        T, per = x.shape[0], shape.experts_per_dept
        al, rows = dense_alignment(T, shape.n_dept, per, tiles.dense_block_m or tiles.dept_block_m,
                                   x.device)
        a1 = torch.empty(T * shape.n_dept, 2 * shape.h_ffn, dtype=x.dtype, device=x.device)
        launches["dense"] = lambda: dept_up_gemm(x, w["dept_gate"], w["dept_up"], a1, al, rows,
                                                 per, tiles.dept_up, shape.operator)
        launches["dense"]()
    return launches


# arrangement -> phases, one after another; a phase's sequences run side by side (streams)
ARRANGEMENTS = {
    "moe": {"chain": [[["w13", "w2"]]], "free": [[["w13"], ["w2"]]]},
    "deamoe": {
        "chain": [[["dense", "expert_up", "expert_down", "dept_down"]]],
        "dense|rest": [[["dense"], ["expert_up", "expert_down", "dept_down"]]],
        "dense>up|down|ddown": [[["dense"]], [["expert_up"], ["expert_down"], ["dept_down"]]],
        "free": [[["dense"], ["expert_up"], ["expert_down"], ["dept_down"]]],
    },
}


def arrangement_fn(kind: str, name: str, per_copy: list[dict], repeats: int, device):
    phases = ARRANGEMENTS[kind][name]

    def run():
        for _ in range(repeats):
            for launches in per_copy:
                for phase in phases:
                    run_parallel([[launches[n] for n in seq] for seq in phase], device)
    return run


def main():
    ap = point_parser(__doc__)
    ap.add_argument("--dry-run", action="store_true",
                    help="small shapes on the CPU (the plumbing, not the times)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.dry_run else "cuda"
    s = MicrobenchSettings()
    kw = {}
    if args.dry_run:
        from deamoe.config import DeaMoEShape, MoEShape, Table1Row

        s = dataclasses.replace(s, rotate_bytes=1.0, min_layers_per_graph=1)
        kw["shapes"] = lambda model: Table1Row(
            model, MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2),
            DeaMoEShape(h=64, h_ffn=16, n_dept=4, n_expert=16, k_dept=2, k_expert=4), 1.0, 1.0)
    rows = []
    for model, shape, weights, batch, knobs, inputs, _ in committed_points(
            args.points, s, device=device, **kw):
        tiles = make_tiles(shape, knobs)
        # the whole layer (router, routing, align, committed split and streams, cast) for
        # scale, before and after the arrangements (their setup must not change it)
        times = {"layer": time_knob_sets(shape, weights, inputs, {"layer": knobs}, s, args.rounds,
                                         args.replays)["layer"]}
        # the arrangements replay draw 0's first pass (launches built for fixed routings):
        # their bytes are those routings', not the mean over the layer's rotating draws
        xs = inputs.live[:len(weights)]
        per_copy = [gemm_launches(shape, w, x, tiles) for w, x in zip(weights, xs)]
        with torch.no_grad():
            fixed = sum(step_bytes(shape, step_routing(shape, w, x)[0])
                        for w, x in zip(weights, xs)) / len(weights)
        gemm_bytes = fixed - 2 * router_params(shape)  # what the arrangements' GEMMs stream
        repeats = graph_repeats(len(weights), s)
        names = list(ARRANGEMENTS[shape.kind])
        times.update({n: [] for n in names})
        for _ in range(args.rounds):
            for n in names:
                fn = arrangement_fn(shape.kind, n, per_copy, repeats, device)
                times[n].append(time_fn(fn, args.replays, repeats * len(weights)).median_us)
        times["layer after"] = time_knob_sets(shape, weights, inputs, {"layer": knobs}, s,
                                              args.rounds, args.replays)["layer"]
        for n in names + ["layer", "layer after"]:
            us = min(times[n])
            rows.append({"model": model, "kind": shape.kind, "batch": batch,
                         "arrangement": n, "us": us, "runs": times[n], "gemm_bytes": gemm_bytes,
                         "tbps": gemm_bytes / (us * 1e-6) / 1e12,
                         "vs_chain_us": us - min(times["chain"])})
            print(f"{model:16s} {shape.kind:6s} {batch:4d} {n:20s} {us:8.1f} us "
                  f"({us - min(times['chain']):+6.1f})", flush=True)
        pd.DataFrame(rows).to_csv(args.out / "overlap_bound.csv", index=False)
        del per_copy
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
