"""Per-GEMM breakdown of one decode step (sibling benchmark of fused_moe.py / deamoe_decode.py).

Each stage's launch is captured alone in a CUDA graph and timed (median of replays); its bytes
are the weights of the groups (experts or departments) this routing uses.  Tells which GEMM of
a layer falls short of the read roofline.  CUDA only.
"""

from __future__ import annotations

import torch

from deamoe.kernels.fp8 import weight_bytes


def _used(ids: torch.Tensor, per_group: int) -> int:
    return int(torch.unique(ids // per_group).numel())


def stage_times(stages, ids: torch.Tensor, per_group: dict[str, int], reps: int = 30,
                only: set[str] | None = None) -> list[dict]:
    """Rows {stage, us, bytes, tbps}; `stages` from fused_moe_stages / deamoe_stages (all run
    once first, so every stage reads real data; then each stage in `only`, default all, timed)."""
    import triton.testing

    for _, launch, _ in stages:  # align + fill intermediates so every stage reads real data
        launch()
    torch.cuda.synchronize()
    rows = []
    for name, launch, tensors in stages:
        if only is not None and name not in only:
            continue
        ms = triton.testing.do_bench_cudagraph(launch, rep=max(20, reps), return_mode="median")
        nbytes = 0
        if tensors:
            used = _used(ids, per_group[name])
            nbytes = used * sum(weight_bytes(t[0]) for t in tensors)
        rows.append({"stage": name, "us": ms * 1e3, "bytes": nbytes,
                     "tbps": nbytes / (ms * 1e-3) / 1e12 if nbytes else float("nan")})
    return rows
