"""A/B/C... of knob sets on the committed picks (NOTES.md v23, v31) on the H200.

usage: [ROUNDS=2] python scripts/h200_variants.py OUT_DIR [moe/]NAME:KNOB=VALUE[,KNOB=VALUE...] [...]
       MODEL:BATCH [...]
For each point: the baseline layer on its committed knobs (reports/measured/h200/microbench.csv)
timed twice (its spread is the noise) and on each `moe/` variant, and the DeaMoE layer on its
committed knobs and on each other variant (the committed knobs updated with that variant's),
same routing and rotated weight copies, every set timed twice, interleaved; a graph of >=
min_layers_per_graph layer steps as in the microbenchmark, median of 50 replays -> variants.csv
(us = the better of the two runs); prints DeaMoE's time and speedup / ideal per variant (against
the committed baseline) and the baseline variants' times.  A VALUE "+sfx" appends "-sfx" to the
committed tile of that knob (`expert_up=+p1`: the point's own tile, persistent).  A KNOB with a
dot is a module switch set while that variant runs (`deamoe.kernels.align.MEMORY_PHASES=1`,
microbench.time_knob_sets).  CUDA only.
"""

import os
import sys
from pathlib import Path

import pandas as pd

from deamoe.bench.microbench import MicrobenchSettings, committed_points, time_knob_sets

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
variants, points = {"moe": {}, "deamoe": {}}, []
for arg in sys.argv[2:]:
    if "=" in arg:
        name, spec = arg.split(":", 1)
        kind = "moe" if name.startswith("moe/") else "deamoe"
        variants[kind][name] = {k: int(v) if v.isdigit() else v
                                for k, v in (part.split("=", 1) for part in spec.split(","))}
    else:
        points.append(arg)


def apply(knobs: dict, variant: dict) -> dict:
    return {**knobs, **{k: f"{knobs[k]}-{v[1:]}" if isinstance(v, str) and v.startswith("+")
                        else v for k, v in variant.items()}}
s = MicrobenchSettings()
rows = []
for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(points, s):
    sets = {"committed": knobs}
    if shape.kind == "moe":
        sets["committed again"] = knobs
    sets.update({name: apply(knobs, v) for name, v in variants[shape.kind].items()})

    runs = time_knob_sets(shape, weights, inputs, sets, s, rounds=int(os.environ.get("ROUNDS", 2)),
                          label=f"{model} {batch}")
    for name, r in runs.items():
        rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                     "variant": name, "us": min(r), "runs": r})
        print(f"{model:16s} {shape.kind:6s} {batch:4d} {name:18s} {min(r):8.1f} us", flush=True)
    pd.DataFrame(rows).to_csv(out / "variants.csv", index=False)
df = pd.DataFrame(rows)
base = df[(df.kind == "moe") & (df.variant == "committed")].set_index(["model", "batch"])
dea = df[df.kind == "deamoe"].copy()
dea["speedup"] = [base.loc[(m, b), "us"] / u for m, b, u in zip(dea.model, dea.batch, dea.us)]
dea["sp_over_ideal"] = [sp / (base.loc[(m, b), "bytes"] / by)
                        for m, b, sp, by in zip(dea.model, dea.batch, dea.speedup, dea.bytes)]
print(dea.pivot_table(index=["model", "batch"], columns="variant", values="us").round(1).to_string())
print(dea.pivot_table(index=["model", "batch"], columns="variant",
                      values="sp_over_ideal").round(4).to_string())
print(dea.pivot_table(index=["model", "batch"], columns="variant",
                      values="speedup").round(4).to_string())
print(df[df.kind == "moe"].pivot_table(index=["model", "batch"], columns="variant",
                                       values="us").round(1).to_string())
