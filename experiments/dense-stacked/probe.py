"""Probe: DeaMoE's dense department up-projection on FP8 (w8a8) weights, alone in a CUDA graph
(4 weight copies a graph), as the layer runs it (EPI_BOTH: gate and up of one N tile in one
program) against one EPI_ACT GEMM over the stacked [gate; up] matrix (N = 2f: twice the
programs, half the bytes each), on several tiles.  Prints us and TB/s; checks the outputs equal."""
import sys

import torch

from deamoe.bench.layer_step import time_fn
from deamoe.kernels.align import dense_alignment
from deamoe.kernels.deamoe_decode import dept_up_gemm
from deamoe.kernels.fp8 import Fp8Format, Fp8Weight, quantize, weight_bytes
from deamoe.kernels.gemm_spec import EPI_ACT, ROW_TOKDEPT, ROW_TOKEN, GemmSpec
from deamoe.kernels.grouped_gemm import grouped_gemm
from deamoe.kernels.tile_config import TileConfig
from deamoe.shapes import table1_row

fmt = Fp8Format.of("fp8-w8a8")
TILES = ["n64-k128-w4-s6-tma-swap-pq", "n128-k128-w4-s5-tma-swap-pq", "n64-k128-w4-s4-pq",
         "n128-k128-w4-s4-tma-pq", "n64-k128-w4-s8-tma-swap-pq", "n32-k128-w4-s8-pq"]
STACKED = GemmSpec(a_mode=ROW_TOKEN, c_mode=ROW_TOKDEPT, epi=EPI_ACT)
dev = "cuda"
rows_out = []
for model in sys.argv[1].split(","):
    shape = table1_row(model).deamoe
    d, f, h, per = shape.n_dept, shape.h_ffn, shape.h, shape.n_expert // shape.n_dept
    copies = []
    for c in range(4):
        g = torch.Generator(device=dev).manual_seed(c)
        gate = torch.randn(d, f, h, generator=g, device=dev, dtype=torch.bfloat16) * h ** -0.5
        up = torch.randn(d, f, h, generator=g, device=dev, dtype=torch.bfloat16) * h ** -0.5
        qg, qu = quantize(gate, fmt), quantize(up, fmt)
        del gate, up
        st = Fp8Weight(torch.cat([qg.q, qu.q], 1).contiguous(),
                       torch.cat([qg.scale, qu.scale], 1).contiguous(), fmt)
        copies.append((qg, qu, st))
    nbytes = weight_bytes(copies[0][0]) + weight_bytes(copies[0][1])
    for T in (4, 16, 64):
        al, ids = dense_alignment(T, d, per, 16 if T < 64 else 64, dev)
        xs = [torch.randn(T, h, device=dev, dtype=torch.bfloat16) for _ in copies]
        a1 = [torch.empty(T * d, 2 * f, device=dev, dtype=torch.bfloat16) for _ in copies]
        a2 = [torch.empty(T * d, 2 * f, device=dev, dtype=torch.bfloat16) for _ in copies]
        for name in TILES:
            tile = TileConfig.parse(name)
            spec = STACKED.on(tile, act="silu", n_dept=d, per_group=per)

            def both():
                for (qg, qu, _), x, o in zip(copies, xs, a1):
                    dept_up_gemm(x, qg, qu, o, al, ids, per, tile, "silu")

            def stacked():
                for (_, _, st), x, o in zip(copies, xs, a2):
                    grouped_gemm(x, st, o, al, ids, spec)
            try:
                both(); stacked(); torch.cuda.synchronize()
            except Exception as exc:  # a tile that does not compile here
                print(f"{model} T={T} {name}: {type(exc).__name__}", flush=True)
                continue
            same = all(torch.equal(p, q) for p, q in zip(a1, a2))
            tb = {}
            for rnd in range(2):
                for label, fn in (("both", both), ("stacked", stacked)):
                    us = time_fn(fn, 50, per_call=len(copies)).median_us
                    tb[label] = min(tb.get(label, 1e9), us)
            print(f"{model:16s} T={T:3d} {name:28s} both {tb['both']:7.1f} us "
                  f"{nbytes / tb['both'] / 1e6:5.2f} TB/s  stacked {tb['stacked']:7.1f} us "
                  f"{nbytes / tb['stacked'] / 1e6:5.2f} TB/s  same={same}", flush=True)
