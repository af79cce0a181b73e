"""Is it the atomic epilogue that slows DeaMoE's expert_down per byte?  (NOTES.md v35; CUDA)

usage: python scripts/h200_down_epilogue.py OUT_DIR MODEL:BATCH [...] [--rounds R]
For each point, the down-projection GEMM of both layers alone, on its committed tile
(reports/measured/h200/microbench.csv) and the routing of the point's inputs, over the rotated
layer copies in one CUDA graph (stage_benchmark.rotated_us), with its output written three ways:
  atomic  as the layer: fp32 atomic adds, weighted (DeaMoE: into S[(token, department)] after
          the operator; baseline: into out[token])
  no act  DeaMoE only: the same without the operator on the output
  store   plain fp32 stores, one row per (token, expert) pair, no atomics (wrong for the layer)
-> down_epilogue.csv with the weight bytes each streams and TB/s.  --moe-shape H,F,E,K runs the
baseline layer's GEMM on another MoE shape (the point's baseline tile and top-K routing), e.g.
1536,1536,320,8: the baseline kernel on weights shaped like Qwen3 DeaMoE's expert_down.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from deamoe.bench.layer_step import step_routing
from deamoe.bench.knobs import make_tiles
from deamoe.bench.microbench import MicrobenchSettings, committed_points, point_parser
from deamoe.config import MoEShape, table1_row
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.grouped_gemm import EPI_ACT, ROW_PAIR, ROW_TOKDEPT, ROW_TOKEN, grouped_gemm
from deamoe.kernels.stage_benchmark import rotated_us


def down_launches(shape, w: dict, x: torch.Tensor, tiles) -> tuple[dict, int]:
    """({variant: launch}, weight bytes) of one layer copy's down GEMM."""
    with torch.no_grad():
        ids, wts = step_routing(shape, w, x)
    T, P, dev = x.shape[0], ids.numel(), x.device
    if shape.kind == "deamoe":
        per, f = shape.experts_per_dept, shape.h_ffn
        al = align(ids, AlignSpec(n_groups=shape.n_dept, per_group=per, dedup=True,
                                  block_m=tiles.dept_block_m),
                   AlignSpec(n_groups=shape.n_expert, block_m=tiles.expert_block_m))[1]
        wd, n_out, k_rows = w["expert_down"], f, T * shape.n_dept
        common = dict(a_mode=ROW_PAIR, epi=EPI_ACT, tile=tiles.expert_down, n_dept=shape.n_dept,
                      per_group=per, weights=wts)
        atomic = dict(c_mode=ROW_TOKDEPT, atomic=True)
        act = shape.operator
    else:
        al = align(ids, AlignSpec(n_groups=shape.n_expert, block_m=tiles.block_m))[0]
        wd, n_out, k_rows = w["down_proj"], shape.h, T
        common = dict(a_mode=ROW_PAIR, epi=EPI_ACT, tile=tiles.w2, weights=wts)
        atomic = dict(c_mode=ROW_TOKEN, atomic=True)
        act = "none"
    a = torch.randn(P, wd.shape[2], dtype=x.dtype, device=dev)
    acc = torch.zeros(k_rows, n_out, dtype=torch.float32, device=dev)
    z = torch.empty(P, n_out, dtype=torch.float32, device=dev)
    launches = {"atomic": lambda: grouped_gemm(a, wd, acc, al, ids, act=act, **atomic, **common),
                "store": lambda: grouped_gemm(a, wd, z, al, ids, act=act, c_mode=ROW_PAIR,
                                              **common)}
    if shape.kind == "deamoe":
        launches["no act"] = lambda: grouped_gemm(a, wd, acc, al, ids, act="none", **atomic,
                                                  **common)
    used = int(torch.unique(ids).numel())
    return launches, used * wd[0].numel() * wd.element_size()


def main():
    ap = point_parser(__doc__)
    ap.add_argument("--moe-shape", help="H,F,E,K: the baseline layer's shape instead of Table 1's")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    s = MicrobenchSettings()
    kw = {}
    if args.moe_shape:
        h, f, e, k = (int(v) for v in args.moe_shape.split(","))
        kw["shapes"] = lambda model: dataclasses.replace(
            table1_row(model), baseline=MoEShape(h=h, h_ffn=f, n_expert=e, k_expert=k))
    rows = []
    for model, shape, weights, batch, knobs, inputs, _ in committed_points(args.points, s, **kw):
        tiles = make_tiles(shape, knobs)
        per_copy = [down_launches(shape, w, x, tiles) for w, x in zip(weights, inputs.live)]
        nbytes = sum(b for _, b in per_copy) / len(per_copy)
        names = list(per_copy[0][0])
        times = {n: [] for n in names}
        for _ in range(args.rounds):
            for n in names:
                times[n].append(rotated_us(lambda i, n=n: per_copy[i][0][n](), len(per_copy)))
        for n in names:
            us = min(times[n])
            rows.append({"model": model, "kind": shape.kind, "batch": batch, "variant": n,
                         "shape": f"{shape.h}x{shape.h_ffn}x{shape.n_expert}",
                         "tile": (tiles.expert_down if shape.kind == "deamoe" else tiles.w2).name,
                         "us": us, "runs": times[n], "bytes": nbytes,
                         "tbps": nbytes / (us * 1e-6) / 1e12})
            print(f"{model:16s} {shape.kind:6s} {batch:4d} {n:7s} {us:8.1f} us "
                  f"{rows[-1]['tbps']:.3f} TB/s", flush=True)
        pd.DataFrame(rows).to_csv(args.out / "down_epilogue.csv", index=False)


if __name__ == "__main__":
    main()
