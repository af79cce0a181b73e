"""The cuBLAS bar of dept_gemm_probe.py: torch._scaled_mm (e4m3 operands) on the department GEMMs'
shapes -- per department with tensor-, row- or 1x128 x 128x128 block-wise scales, torch's grouped
FP8 GEMM (row-wise), and for the dense up-projection one GEMM over all departments, alone and as
the layer's whole stage (x quantised, the GEMM, silu in place).  Block-wise scaling is the
checkpoint's format and computes the layer's numbers (checked); the others are a speed bound."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from deamoe.kernels.fp8 import quantize_activations
from deamoe.kernels.fp8_quant import quantize_groups


def rel_err(got, want) -> float:
    ok = torch.isfinite(got).all()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item() if ok else float("inf")


def outer_major(scales: torch.Tensor) -> torch.Tensor:
    """[M, K/128] activation scales column-major, as cuBLAS's block-wise scaling reads them."""
    return scales.t().contiguous().t()


def quant_a(a: torch.Tensor, how: str):
    """e4m3 A and its scales for cuBLAS: per tensor, row, or 1x128 group (outer-dim-major)."""
    if how == "block":
        q, s = quantize_activations(a, 128)
        return q, outer_major(s)
    if how == "row":
        return quantize_activations(a, a.shape[1])
    q, s = quantize_activations(a.reshape(1, -1), a.numel())  # the tensor as one group
    return q.view(a.shape), s.reshape(())


def cublas_variants(p, gemm: str, ref: dict) -> dict:
    """{variant: (fn over every copy, launches a copy, weight-scale bytes a copy, rel or NaN)} of
    dept_gemm_probe.Point p's `gemm`, checked against its reference `ref`."""
    d, T = p.shape.n_dept, p.T
    N, K = p.size(gemm)
    wkey, bf16 = "down" if gemm == "dept_down" else "both", torch.bfloat16
    a_rows, raw = {}, {}
    for j in range(d):  # department j's rows of A, padded to 16 rows (cuBLAS's alignment)
        t = (torch.arange(T, device=p.dev) if gemm == "dept_up_dense"
             else p.mask[:, j].nonzero()[:, 0])
        if t.numel():
            a = p.s.view(T, d, -1)[t, j] if gemm == "dept_down" else p.x[t]
            a_rows[j] = torch.cat([a, a.new_zeros(-t.numel() % 16, a.shape[1])])
            raw[j] = ref["raw_down" if gemm == "dept_down" else "raw_up"][t, j]
    used, out = list(a_rows), {}
    for how in ("tensor", "tensor-fast", "row", "row-fast", "block"):
        kind, fast = how.split("-")[0], how.endswith("-fast")
        qa = {j: quant_a(a_rows[j], kind) for j in used}
        ones = torch.ones((1, N) if kind == "row" else (), device=p.dev)  # placeholders
        args = [[(*qa[j], w[wkey].q[j].t(), w[wkey].scale[j].t() if kind == "block" else ones)
                 for j in used] for w in p.w]  # block: [K/128, N/128] weight scales

        def fn(args=args, fast=fast):
            return [[torch._scaled_mm(a, b, sa, sb, out_dtype=bf16, use_fast_accum=fast)
                     for a, sa, b, sb in per_copy] for per_copy in args]
        rel = float("nan")
        if kind == "block":  # the one variant computing our numbers (no activation)
            try:
                got = fn()[0]
                rel = rel_err(torch.cat([g[:raw[j].shape[0]].float() for g, j in zip(got, used)]),
                              torch.cat([raw[j] for j in used]))
            except Exception:  # noqa: BLE001 - its row says why, when it is timed
                pass
        scale_bytes = {"block": 4 * N // 128 * K // 128, "row": 4 * N, "tensor": 4}[kind]
        out[how] = (fn, len(used), scale_bytes * len(used), rel)
    # all departments in one launch: torch's grouped FP8 GEMM (row-wise scales only)
    q_rows = [quant_a(a_rows[j], "row") for j in used]
    a_cat, s_cat = torch.cat([q for q, _ in q_rows]), torch.cat([s[:, 0] for _, s in q_rows])
    offs = torch.tensor([a_rows[j].shape[0] for j in used], device=p.dev).cumsum(0).int()
    ws = [(w[wkey].q if len(used) == d else w[wkey].q[used]).transpose(-2, -1) for w in p.w]
    sb = torch.ones(len(used), N, device=p.dev)
    for fast in (False, True):
        def grouped(fast=fast):  # B [g, K, N] column-major
            return [torch._scaled_grouped_mm(a_cat, b, s_cat, sb, offs=offs, out_dtype=bf16,
                                             use_fast_accum=fast) for b in ws]
        out["grouped-row" + "-fast" * fast] = (grouped, 1, 4 * N * len(used), float("nan"))
    if gemm == "dept_up_dense":  # every department in one GEMM: N = d x 2f, the same bytes
        (qb, sbk), (qr, sr) = quant_a(p.x, "block"), quant_a(p.x, "row")
        big = [(w["both"].q.view(d * N, K).t(), w["both"].scale.view(d * N // 128, -1).t())
               for w in p.w]
        ones = torch.ones(1, d * N, device=p.dev)

        def blk():
            return [torch._scaled_mm(qb, b, sbk, s, out_dtype=bf16) for b, s in big]
        try:  # our numbers too (block scales): checked like the per-department variant
            rel = rel_err(blk()[0].float().view(T, d, N), ref["raw_up"])
        except Exception:  # noqa: BLE001 - its row says why, when it is timed
            rel = float("nan")
        out["1gemm-block"] = (blk, 1, 4 * d * N * K // 128 ** 2, rel)

        def stage():  # the stage in the layer: x quantised (the layer's '-pq' launch), its
            q, s = quantize_groups(p.x, 128)  # scales column-major, the GEMM, silu in place:
            s = outer_major(s)  # the result is a1 ([T, d x 2f] = [(t, j), 2f])
            return [F.silu(torch._scaled_mm(q, b, s, sb, out_dtype=bf16), inplace=True)
                    for b, sb in big]
        try:
            rel = rel_err(stage()[0].float().view(T, d, N), ref["dept_up"])
        except Exception:  # noqa: BLE001 - its row says why, when it is timed
            rel = float("nan")
        out["1gemm-block-stage"] = (stage, 4, 4 * d * N * K // 128 ** 2, rel)
        out["1gemm-row-fast"] = (lambda: [torch._scaled_mm(qr, b, sr, ones, out_dtype=bf16,
                                                           use_fast_accum=True) for b, _ in big],
                                 1, 4 * d * N, float("nan"))
    return out
