"""What the routing head costs inside each committed layer (NOTES.md v34; CUDA).

usage: python scripts/h200_head_cost.py OUT_DIR MODEL:BATCH [...]
For each point, both layers on their committed tiles (reports/measured/h200/microbench.csv),
timed as the microbenchmark times them (>= min_layers_per_graph layer steps per graph over the
rotated copies, two interleaved rounds, the better kept):
  layer     the committed step: router GEMM + routing + align + GEMMs + cast
  no route  the same step with the routing computed once before the capture (ids and weights
            given): the router GEMM and the routing kernel leave the graph, align stays (beside
            DeaMoE's dense department GEMM, as in the layer)
The difference is what the router GEMM and the routing cost on the critical path -- the most a
layer could gain by hiding them (e.g. inside the dense department GEMM's launch).  -> head_cost.csv
"""

from __future__ import annotations

import pandas as pd
import torch

from deamoe.bench.layer_step import layer_steps, step_routing, time_fn
from deamoe.bench.knobs import make_tiles
from deamoe.bench.microbench import (MicrobenchSettings, committed_points, graph_repeats,
                                     point_parser)


def main():
    ap = point_parser(__doc__)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    s = MicrobenchSettings()
    rows = []
    for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(args.points, s):
        tiles = make_tiles(shape, knobs)
        repeats = graph_repeats(len(weights), s)
        # draw 0 only (routes computed beforehand cannot rotate with StepInputs.prepare)
        xs = inputs.live
        with torch.no_grad():  # computed once, before the capture: no router GEMM, no route
            routes = [step_routing(shape, weights[i % len(weights)], x) for i, x in enumerate(xs)]
        fns = {"layer": layer_steps(shape, weights, xs, tiles, repeats),
               "no route": layer_steps(shape, weights, xs, tiles, repeats, routed=routes)}
        times = {n: [] for n in fns}
        for _ in range(args.rounds):
            for n, fn in fns.items():
                times[n].append(time_fn(fn, args.replays, repeats * len(weights)).median_us)
        for n in fns:
            us = min(times[n])
            rows.append({"model": model, "kind": shape.kind, "batch": batch, "variant": n,
                         "us": us, "runs": times[n], "bytes": nbytes,
                         "vs_layer_us": us - min(times["layer"])})
            print(f"{model:16s} {shape.kind:6s} {batch:4d} {n:9s} {us:8.1f} us "
                  f"({us - min(times['layer']):+6.1f})", flush=True)
        pd.DataFrame(rows).to_csv(args.out / "head_cost.csv", index=False)


if __name__ == "__main__":
    main()
