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

from deamoe.config import DeaMoEShape, table1_row
from deamoe.kernels.align import AlignSpec, align
from deamoe.routing import route


def align_launches(shape, ids: torch.Tensor) -> dict:
    """{piece: launch} of the align a layer of `shape` runs on `ids`: the whole launch as the
    layer has it (with its zeroing programs), and for DeaMoE each task alone and the department
    task without its dedup (timing only).  Shared with scripts/h200_head_parts.py."""
    tokens = ids.shape[0]
    expert = AlignSpec(shape.n_expert)
    if not isinstance(shape, DeaMoEShape):
        acc = torch.empty(tokens * shape.h, device=ids.device)
        return {"align_layer": lambda: align(ids, expert, zero=acc),
                "align_expert": lambda: align(ids, expert)}
    dept = AlignSpec(shape.n_dept, shape.experts_per_dept, dedup=True)
    acc = torch.empty(tokens * (shape.n_dept * shape.h_ffn + shape.h), device=ids.device)
    return {
        "align_layer": lambda: align(ids, dept, expert, zero=acc),
        "align_dept_expert": lambda: align(ids, dept, expert),
        "align_dept": lambda: align(ids, dept),
        "align_dept_nodedup": lambda: align(ids, AlignSpec(shape.n_dept, shape.experts_per_dept)),
        "align_expert": lambda: align(ids, expert),
    }


def align_variants(model: str, tokens: int) -> list[dict]:
    import triton.testing

    row = table1_row(model)
    ids, _ = route(row.deamoe, torch.randn(tokens, row.deamoe.n_expert, device="cuda"))
    variants = align_launches(row.deamoe, ids)
    variants["baseline-like (top-k ids, expert only)"] = lambda: align(
        ids[:, : row.baseline.k_expert], AlignSpec(row.deamoe.n_expert))
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
