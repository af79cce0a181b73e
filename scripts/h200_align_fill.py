"""align's padding written by a sentinel fill before the scatter vs a masked per-group store after
the scan (`align.PAD_STORE`, NOTES.md v48), on the H200: both outputs checked equal, and the
whole align launch of each layer timed alone in a CUDA graph, the two interleaved.

usage: python scripts/h200_align_fill.py OUT_DIR [TOKENS ...]   (CUDA) -> align_fill.csv
Equal means: the same block count, and the same (group, pair) set and sentinel count over the
used slots (the order of pairs inside a group follows the atomics, so it may differ by run).
"""

import sys
from pathlib import Path

import pandas as pd
import torch
import triton.testing

from deamoe.config import table1_row
from deamoe.kernels import align as align_mod
from deamoe.kernels.align_benchmark import align_launches
from deamoe.kernels.routing_topk import route_kernel

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
tokens_list = [int(a) for a in sys.argv[2:]] or [4, 64, 128]


def canonical(al):
    nb = int(al.num_blocks)
    slots = al.sorted_pairs[: nb * al.block_m].view(nb, al.block_m).long()
    group = al.block_group[:nb].long()[:, None].expand_as(slots)
    real = slots < al.num_pairs
    key = (group[real] * al.num_pairs + slots[real]).sort().values
    return nb, key.cpu(), int((~real).sum())


def same(a, b):
    return all(x[0] == y[0] and torch.equal(x[1], y[1]) and x[2] == y[2] for x, y in zip(a, b))


_buffers = align_mod._buffers


def _poisoned(P, spec, device):  # a slot the launch leaves unwritten shows up as pair -7
    al, scratch = _buffers(P, spec, device)
    al.sorted_pairs.fill_(-7)
    return al, scratch


rows = []
for model in ("Baseline-7B", "Qwen3-235B-A22B", "DeepSeek-V3"):
    row = table1_row(model)
    for shape in (row.baseline, row.deamoe):
        for T in tokens_list:
            logits = torch.randn(T, shape.n_expert, device="cuda", dtype=torch.bfloat16)
            ids, _ = route_kernel(shape, logits)
            launch = align_launches(shape, ids)["align_layer"]
            # the check: every buffer the launch allocates is poisoned first (_poisoned)
            outs = {}
            align_mod._buffers = _poisoned
            for pad_store in (True, False):
                align_mod.PAD_STORE = pad_store
                outs[pad_store] = [canonical(al) for al in launch()]
            align_mod._buffers = _buffers
            ok = same(outs[True], outs[False])
            times = {True: [], False: []}
            for _ in range(2):
                for pad_store in (True, False):
                    align_mod.PAD_STORE = pad_store
                    times[pad_store].append(triton.testing.do_bench_cudagraph(
                        launch, rep=30, return_mode="median") * 1e3)
            align_mod.PAD_STORE = True
            for pad_store in (True, False):
                rows.append({"model": model, "kind": shape.kind, "tokens": T,
                             "variant": "pad_store" if pad_store else "fill",
                             "us": min(times[pad_store]), "runs": times[pad_store],
                             "same_as_pad_store": ok})
            print(f"{model:16s} {shape.kind:6s} {T:4d} pad_store {min(times[True]):6.2f} us  "
                  f"fill {min(times[False]):6.2f} us  same={ok}", flush=True)
pd.DataFrame(rows).to_csv(out / "align_fill.csv", index=False)
