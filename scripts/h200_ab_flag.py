"""A/B of one kernel switch on the committed tiles (NOTES.md v12, v13, v14) on the H200.

usage: python scripts/h200_ab_flag.py OUT_DIR (MODULE.FLAG | KNOB=VALUE[,KNOB=VALUE...])
                                      [MODEL:BATCH ...]
For each point, both layers, the committed tiles (reports/measured/h200/microbench.csv), the
same routing and rotated weight copies: the layer step timed with MODULE.FLAG = False and True
(or the committed knobs without and with the KNOB=VALUE settings that the layer's tiles have,
e.g. expert_up=...,w13=... sets one in each layer; a layer whose tiles have none of them runs
the same tiles twice, which shows the noise), interleaved twice (CUDA graph, median of 50
replays each) -> ab_flag.csv; prints the ratio.  CUDA only.
"""

import importlib
import sys
from pathlib import Path

import pandas as pd

from deamoe.bench.layer_step import layer_steps, time_fn
from deamoe.bench.knobs import make_tiles
from deamoe.bench.microbench import MicrobenchSettings, committed_points

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
switch = sys.argv[2]
if "=" in switch:  # tile knobs, e.g. split_launches=2 or expert_up=n128-k64-w4-s3-tma,w13=...
    settings = {}
    for part in switch.split(","):
        knob, value = part.split("=", 1)
        settings[knob] = int(value) if value.isdigit() else value
    mod = flag = None
else:
    mod_name, flag = switch.rsplit(".", 1)
    mod = importlib.import_module(mod_name)
s = MicrobenchSettings()
rows = []
for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(sys.argv[3:], s):
    variants = {False: make_tiles(shape, knobs), True: make_tiles(shape, knobs)}
    if mod is None:  # only the knobs this layer's tiles have (none: the noise)
        own = {k: v for k, v in settings.items() if hasattr(variants[False], k)}
        variants[True] = make_tiles(shape, {**knobs, **own})

    def runner(tiles):
        return layer_steps(shape, weights, inputs.live, tiles)
    res = {False: [], True: []}
    for value in (False, True, False, True):
        if mod is not None:
            setattr(mod, flag, value)
        res[value].append(time_fn(runner(variants[value]), 50, len(weights),
                                   prepare=inputs.prepare).median_us)
    rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                 "off_us": min(res[False]), "on_us": min(res[True]),
                 "off_runs": res[False], "on_runs": res[True]})
    r = rows[-1]
    print(f"{model:16s} {shape.kind:6s} {batch:4d} off {r['off_us']:8.1f} on "
          f"{r['on_us']:8.1f} us ({r['on_us'] / r['off_us']:.3f}x)", flush=True)
    pd.DataFrame(rows).to_csv(out / "ab_flag.csv", index=False)
if mod is not None:
    setattr(mod, flag, True)
df = pd.DataFrame(rows)
w = df.pivot_table(index=["model", "batch"], columns="kind", values=["off_us", "on_us"])
w["sp_off"] = w[("off_us", "moe")] / w[("off_us", "deamoe")]
w["sp_on"] = w[("on_us", "moe")] / w[("on_us", "deamoe")]
print(w.round(3).to_string())
