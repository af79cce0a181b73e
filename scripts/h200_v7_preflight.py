"""Device preflight for the v7 kernels (NOTES.md v7): is PDL + L2 prefetch usable and correct?

usage: python scripts/h200_v7_preflight.py   (CUDA).  For Baseline-7B and DeaMoE-7B shapes at
1/64/128 tokens: four layer copies captured in one CUDA graph (as the microbenchmark does),
replayed 20 times, every output compared with the same layer run eagerly without PDL
(rel err < 1e-2, no NaN).  Tries PDL + prefetch, then PDL alone, then neither; the last line
is the environment to use: `export DEAMOE_PDL=.. DEAMOE_PREFETCH=..`.
"""

import os
import traceback

import torch
import triton

from deamoe.bench.layer_step import ffn_step, random_weights
from deamoe.config import table1_row


def check(env: dict) -> str | None:
    os.environ.update(env)
    for model in ("Baseline-7B",):
        row = table1_row(model)
        for shape in (row.baseline, row.deamoe):
            ws = [random_weights(shape, "cuda", seed=c) for c in range(4)]
            for T in (1, 64, 128):
                xs = [torch.randn(T, shape.h, device="cuda", dtype=torch.bfloat16) for _ in ws]
                os.environ["DEAMOE_PDL"] = "0"
                refs = [ffn_step(shape, w, x).float() for w, x in zip(ws, xs)]
                os.environ.update(env)
                outs = [None] * len(ws)

                def run():
                    for i, (w, x) in enumerate(zip(ws, xs)):
                        outs[i] = ffn_step(shape, w, x)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    run()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    run()
                for rep in range(20):
                    for o in outs:
                        o.fill_(float("nan"))
                    g.replay()
                    torch.cuda.synchronize()
                    for o, r in zip(outs, refs):
                        err = float((o.float() - r).norm() / r.norm().clamp_min(1e-20))
                        if not err < 1e-2:
                            return f"{shape.kind} T={T} replay {rep}: rel err {err:.3g}"
    return None


print("triton", triton.__version__, "torch", torch.__version__, torch.cuda.get_device_name())
print("gdc_wait available:", hasattr(triton.language.extra.cuda, "gdc_wait"))
chosen = {"DEAMOE_PDL": "0", "DEAMOE_PREFETCH": "0"}
for env in ({"DEAMOE_PDL": "1", "DEAMOE_PREFETCH": "1"}, {"DEAMOE_PDL": "1", "DEAMOE_PREFETCH": "0"}):
    try:
        bad = check(env)
    except Exception:  # noqa: BLE001 - report and fall back
        traceback.print_exc(limit=3)
        bad = "exception"
    print(env, "->", bad or "ok", flush=True)
    if bad is None:
        chosen = env
        break
print("export " + " ".join(f"{k}={v}" for k, v in chosen.items()))
