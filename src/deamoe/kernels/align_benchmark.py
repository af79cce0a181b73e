"""Sibling benchmark of align.py: where does the align launch spend its time? (CUDA only)

NOTES.md v3-v7: DeaMoE's align took 17-37 us at 640-1280 pairs against 4-7 us for the
baseline's, until v7 found the cause with this benchmark (an int64 division).  It times, at one
routing, the full DeaMoE align (department + expert task + zeroing programs) and each piece
alone, each captured in a CUDA graph (median).
usage: PYTHONPATH=src python3 -m deamoe.kernels.align_benchmark [tokens ...]
"""

from __future__ import annotations

import sys

import torch

from deamoe.config import table1_row
from deamoe.kernels.align import AlignSpec, align
from deamoe.routing import route


def align_variants(model: str, tokens: int) -> list[dict]:
    import triton.testing

    shape = table1_row(model).deamoe
    ids, _ = route(shape, torch.randn(tokens, shape.n_expert, device="cuda"))
    dept = AlignSpec(shape.n_dept, shape.experts_per_dept, dedup=True)
    expert = AlignSpec(shape.n_expert)
    acc = torch.empty(tokens * (shape.n_dept * shape.h_ffn + shape.h), device="cuda")
    variants = {
        "dept+expert+zero": lambda: align(ids, dept, expert, zero=acc),
        "dept+expert": lambda: align(ids, dept, expert),
        "dept only": lambda: align(ids, dept),
        "dept only (no dedup: timing only)": lambda: align(
            ids, AlignSpec(shape.n_dept, shape.experts_per_dept)),
        "expert only": lambda: align(ids, expert),
        "baseline-like (top-k ids, expert only)": lambda: align(
            ids[:, : table1_row(model).baseline.k_expert], AlignSpec(shape.n_expert)),
    }
    rows = []
    for name, fn in variants.items():
        ms = triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")
        rows.append({"model": model, "tokens": tokens, "pairs": ids.numel(), "variant": name,
                     "us": ms * 1e3})
    return rows


if __name__ == "__main__":
    for t in [int(a) for a in sys.argv[1:]] or [16, 64, 128]:
        for row in align_variants("Baseline-7B", t) + align_variants("DeepSeek-V3", t):
            print(row)
