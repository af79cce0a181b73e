"""How much of a measured layer time is the CUDA graph's own launch (NOTES.md v15) on the H200.

usage: python scripts/h200_graph_layers.py OUT_DIR [MODEL:BATCH ...]   (CUDA)
For each point, both layers on their committed knobs (reports/measured/h200/microbench.csv):
the layer step timed with one graph per replay holding the rotated copies once (as the
microbenchmark does: a single layer for Qwen3's 4.8 GB layers) and holding them repeated so
that the graph has >= 8 layer steps (as a model's decode graph has its 60-94 layers); per
layer step, median of 50 replays, both timed twice, interleaved -> graph_layers.csv.
"""

import math
import sys
from pathlib import Path

import pandas as pd

from deamoe.bench.layer_step import layer_steps, time_fn
from deamoe.bench.knobs import make_tiles
from deamoe.bench.microbench import MicrobenchSettings, committed_points

POINTS = ["Qwen3-235B-A22B:4", "Qwen3-235B-A22B:8", "Qwen3-235B-A22B:16", "Qwen3-235B-A22B:64",
          "Qwen3-235B-A22B:128", "DeepSeek-V3:4", "DeepSeek-V3:16", "DeepSeek-V3:64",
          "Baseline-7B:8", "Baseline-7B:128"]
MIN_LAYERS = 8

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
s = MicrobenchSettings()
rows = []
for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(sys.argv[2:] or POINTS, s):
    tiles = make_tiles(shape, knobs)
    repeats = {"copies_once": 1, f">={MIN_LAYERS}_layers": math.ceil(MIN_LAYERS / len(weights))}

    def runner(r):
        return layer_steps(shape, weights, inputs.live, tiles, r)
    runs = {name: [] for name in repeats}
    for _ in range(2):
        for name, r in repeats.items():
            runs[name].append(time_fn(runner(r), 50, r * len(weights),
                                          prepare=inputs.prepare).median_us)
    for name, r in repeats.items():
        rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                     "graph": name, "layers_per_graph": r * len(weights),
                     "us": min(runs[name]), "runs": runs[name]})
        print(f"{model:16s} {shape.kind:6s} {batch:4d} {name:12s} "
              f"{r * len(weights):3d} layers {min(runs[name]):8.1f} us", flush=True)
    pd.DataFrame(rows).to_csv(out / "graph_layers.csv", index=False)
df = pd.DataFrame(rows)
base = df[df.kind == "moe"].set_index(["model", "batch", "graph"])
dea = df[df.kind == "deamoe"].copy()
dea["speedup"] = [base.loc[(m, b, g), "us"] / u
                  for m, b, g, u in zip(dea.model, dea.batch, dea.graph, dea.us)]
dea["sp_over_ideal"] = [sp / (base.loc[(m, b, g), "bytes"] / by) for m, b, g, sp, by in
                        zip(dea.model, dea.batch, dea.graph, dea.speedup, dea.bytes)]
by_point = ["model", "batch"]
print(df.pivot_table(index=by_point, columns=["kind", "graph"], values="us").round(1).to_string())
print(dea.pivot_table(index=by_point, columns="graph", values="sp_over_ideal").round(4).to_string())
dea.to_csv(out / "graph_layers_deamoe.csv", index=False)
