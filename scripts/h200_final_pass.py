"""Would a second pass over the GEMM tiles, on the final knobs, find faster picks? (NOTES.md v21)

usage: python scripts/h200_final_pass.py OUT_DIR [MODEL:BATCH ...]   (CUDA)
The microbenchmark's search (`microbench.search_tiles`) tunes each GEMM's tile once, before it
adds split_launches and DeaMoE's dense department up-projection; v20b found older picks
1-4% faster than the search's.  Here, per point and for both layers alike: the search and its
finalist as the microbenchmark runs them (pick 1), then one more coordinate pass over every
GEMM's tile starting from pick 1 (`microbench.tile_pass`, what `final_tile_pass` adds to the
search: pick 2); both picks re-timed with the full replay count,
interleaved twice -> final_pass.csv (min of the two medians each).
"""

import sys
import time
from pathlib import Path

import pandas as pd

from deamoe.bench.layer_step import layer_steps, time_fn
from deamoe.bench.knobs import GEMM_STAGES, knobs_name, make_tiles
from deamoe.bench.microbench import MicrobenchSettings, layer_copies, point_inputs
from deamoe.bench.search import search_point, tile_pass
from deamoe.config import table1_row

POINTS = ["Baseline-7B:96", "Baseline-7B:128", "Qwen3-235B-A22B:32", "Qwen3-235B-A22B:64"]

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
points = [(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in (sys.argv[2:] or POINTS)]
s = MicrobenchSettings()
rows = []
t0 = time.time()
for model in dict.fromkeys(m for m, _ in points):
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        weights = layer_copies(shape, s)
        for batch in [b for m, b in points if m == model]:
            inputs, nbytes, _ = point_inputs(shape, weights, batch, s)

            def measure(knobs, replays=s.select_replays):
                run = layer_steps(shape, weights, inputs.live, make_tiles(shape, knobs),
                                  compiled=s.compile_routing)
                try:
                    return time_fn(run, replays, len(weights), prepare=inputs.prepare).median_us
                except Exception as exc:  # noqa: BLE001 - a tile that fails is skipped
                    print(f"  {knobs_name(knobs)}: {type(exc).__name__}")
                    return None

            pick1 = search_point(shape, measure, s, batch)
            pick2, _ = tile_pass(shape, measure, s, pick1, measure(pick1))
            changed = sum(pick2[g] != pick1[g] for g in GEMM_STAGES[shape.kind])
            runs = {1: [], 2: []}
            for _ in range(2):
                for key, knobs in ((1, pick1), (2, pick2)):
                    runs[key].append(measure(knobs, s.replays))
            rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                         "pick1_us": min(runs[1]), "pick2_us": min(runs[2]),
                         "tiles_changed": changed,
                         "pick1": knobs_name(pick1), "pick2": knobs_name(pick2),
                         "pick1_runs": runs[1], "pick2_runs": runs[2]})
            r = rows[-1]
            print(f"{model:16s} {shape.kind:6s} {batch:4d} pick1 {r['pick1_us']:8.1f} pick2 "
                  f"{r['pick2_us']:8.1f} us ({r['pick2_us'] / r['pick1_us']:.3f}x, {changed} tiles "
                  f"changed) [{time.time() - t0:.0f} s]", flush=True)
            pd.DataFrame(rows).to_csv(out / "final_pass.csv", index=False)
        del weights
df = pd.DataFrame(rows)
w = df.pivot_table(index=["model", "batch"], columns="kind", values=["pick1_us", "pick2_us"])
w["sp1"] = w[("pick1_us", "moe")] / w[("pick1_us", "deamoe")]
w["sp2"] = w[("pick2_us", "moe")] / w[("pick2_us", "deamoe")]
print(w.round(3).to_string())
