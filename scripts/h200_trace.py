"""Kernel timeline of one decode layer inside its CUDA graph (NOTES.md v8), on the H200.

usage: python scripts/h200_trace.py MICROBENCH_CSV OUT_DIR   (CUDA)
  TRACE_MODELS=a,b and TRACE_BATCHES=4,128 restrict the run (default: the three plotted models
  at 4 / 16 / 64 / 128 tokens); TRACE_COPIES=n sets the layer copies per graph (default 4 for
  Baseline-7B and 1 for the big models, whose single layer shows first-in-graph effects).
For each model and batch, the layer (router GEMM + routing + kernels, + cast where the output
sums in fp32) with the tiles the microbenchmark chose, the copies in one graph, replayed under
torch.profiler: every kernel's stream, start, duration and the idle gap before it (time when
no kernel of any stream runs).  Tells how much of a layer's time is spent between launches (the
fixed cost that separates DeaMoE from its ideal at small batch), whether a GEMM runs slower in
the chain than alone, and which launches overlap on parallel streams.  Writes trace.csv.
"""

import json
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, random_weights
from deamoe.bench.knobs import make_tiles, parse_knobs
from deamoe.config import table1_row

mb = pd.read_csv(sys.argv[1])
out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
rows = []
copies_of = {}
models = os.environ.get("TRACE_MODELS", "Baseline-7B,DeepSeek-V3,Qwen3-235B-A22B").split(",")
batches = [int(b) for b in os.environ.get("TRACE_BATCHES", "4,16,64,128").split(",")]
for model in models:
    row = table1_row(model)
    for kind, shape in (("baseline", row.baseline), ("deamoe", row.deamoe)):
        copies = copies_of[model] = int(os.environ.get("TRACE_COPIES",
                                                       4 if model == "Baseline-7B" else 1))
        ws = [random_weights(shape, "cuda", seed=c) for c in range(copies)]
        for T in batches:
            sel = mb[(mb.model == model) & (mb.batch == T)]
            if sel.empty:
                continue
            tiles = make_tiles(shape, parse_knobs(sel.iloc[0][f"{kind}_tile"]))
            xs = [torch.randn(T, shape.h, device="cuda", dtype=torch.bfloat16) for _ in ws]

            def run():
                for w, x in zip(ws, xs):
                    ffn_step(shape, w, x, tiles=tiles)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                run()
                run()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                run()
            for _ in range(5):
                g.replay()
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    g.replay()
                torch.cuda.synchronize()
            path = out / "tmp_trace.json"
            prof.export_chrome_trace(str(path))
            ev = [e for e in json.loads(path.read_text())["traceEvents"]
                  if e.get("cat") == "kernel"]
            ev.sort(key=lambda e: e["ts"])
            if not ev:
                print(f"{model} {kind} T={T}: no kernel events in the trace", flush=True)
                continue
            per_replay = len(ev) // 5
            ev = ev[-per_replay:]  # the last replay
            t_prev = None  # end of the kernels so far (streams overlap: v13 split, v14 dense)
            for i, e in enumerate(ev):
                gap = 0.0 if t_prev is None else max(0.0, e["ts"] - t_prev)
                t_prev = e["ts"] + e["dur"] if t_prev is None else max(t_prev, e["ts"] + e["dur"])
                rows.append({"model": model, "kind": kind, "batch": T, "i": i,
                             "kernel": e["name"][:60], "stream": e.get("tid"),
                             "start_us": e["ts"] - ev[0]["ts"], "dur_us": e["dur"],
                             "gap_before_us": gap})
            span = max(e["ts"] + e["dur"] for e in ev) - ev[0]["ts"]
            busy = sum(e["dur"] for e in ev)
            idle = sum(r["gap_before_us"] for r in rows[-len(ev):])
            print(f"{model} {kind} T={T}: {len(ev)} kernels on {len({e.get('tid') for e in ev})} "
                  f"streams over {copies} copies, span {span / copies:.1f} us/layer, kernel time "
                  f"{busy / copies:.1f}, idle {idle / copies:.1f}", flush=True)
            path.unlink()
        pd.DataFrame(rows).to_csv(out / "trace.csv", index=False)
        del ws
        torch.cuda.empty_cache()
df = pd.DataFrame(rows)
for (m, k, T), g in df.groupby(["model", "kind", "batch"]):
    if T in (4, 128):
        first = g[g.i < len(g) // copies_of[m]]
        print(m, k, T, " | ".join(f"{r.kernel[:22]} {r.dur_us:.1f} (+{r.gap_before_us:.1f})"
                                  for r in first.itertuples()))
