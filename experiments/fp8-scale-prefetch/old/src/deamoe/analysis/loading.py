"""Expected expert weights loaded per decoding step (Figure 2), by Monte Carlo.

A decoding step with T tokens must stream every expert (baseline), or every department backbone
and every private expert (DeaMoE), that at least one of the T tokens was routed to.  Router logits
are drawn i.i.d. standard normal (the paper's figure assumes no routing skew) and pushed through
deamoe.routing.route, the router the model itself uses; the baseline also has a closed form,
n (1 - (1 - k/n)^T) experts, reported beside the Monte Carlo value as a check.

Shared experts ("<model>+shared" presets) are loaded once per step by both layers: their bytes
are added to both, which pulls the ratio toward 1.

Bytes are given for bf16 weights (2 a parameter) and, from the same routings, for the FFN
matrices in FP8 with 128 x 128 float32 block scales as DeepSeek-V3 ships its experts
(deamoe.kernels.fp8; the `*_fp8` columns): half the bytes plus 4 / 16384 for the scales, so the
ratio moves only by the scales' share.
"""

from __future__ import annotations

import pandas as pd
import torch
from tqdm import tqdm

from deamoe.analysis.budget import loaded_expert_bytes, shared_bytes
from deamoe.kernels.fp8 import Fp8Format
from deamoe.shapes import DeaMoEShape, MoEShape, table1_row
from deamoe.routing import departments_of, route

FP8 = Fp8Format()  # DeepSeek-V3's: e4m3, 128 x 128 blocks


def _distinct(ids: torch.Tensor, n: int) -> torch.Tensor:
    """ids [trials, T, k] -> [trials] number of distinct values."""
    trials = ids.shape[0]
    used = torch.zeros(trials, n, dtype=torch.bool)
    used.scatter_(1, ids.reshape(trials, -1), True)
    return used.sum(1).float()


def loaded_bytes(shape: MoEShape | DeaMoEShape, tokens: int, trials: int, gen: torch.Generator):
    """Monte Carlo: per-trial loaded expert bytes [trials] in bf16 and in FP8 (shared experts
    included), plus mean distinct routed units."""
    logits = torch.randn(trials * tokens, shape.n_expert, generator=gen)
    ids, _ = route(shape, logits)
    ids = ids.view(trials, tokens, -1)
    experts = _distinct(ids, shape.n_expert)
    depts, mean_depts = 0, float("nan")
    if isinstance(shape, DeaMoEShape):
        depts = _distinct(departments_of(ids, shape.experts_per_dept), shape.n_dept)
        mean_depts = depts.mean().item()
    bf16, fp8 = (loaded_expert_bytes(shape, experts, depts, fmt) + shared_bytes(shape, fmt)
                 for fmt in (None, FP8))
    return bf16, fp8, experts.mean().item(), mean_depts


def loading_table(models, tokens, trials: int = 64, seed: int = 0) -> pd.DataFrame:
    """Tidy table: one row per (model, tokens)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    points = [(m, t) for m in models for t in tokens]
    for model, t in tqdm(points, desc="loading", unit="point"):
        row = table1_row(model)
        base, dea = row.baseline, row.deamoe
        b, b8, b_experts, _ = loaded_bytes(base, t, trials, gen)
        d, d8, d_experts, d_depts = loaded_bytes(dea, t, trials, gen)
        n, k = base.n_expert, base.k_expert
        closed = n * (1 - (1 - k / n) ** t)
        ratio = d.mean().item() / b.mean().item()
        rows.append(
            {
                "model": model,
                "tokens": t,
                "ratio": ratio,
                # Delta-method standard error of the ratio of two independent means.
                "ratio_stderr": ratio
                * ((d.std().item() / d.mean().item()) ** 2 / trials
                   + (b.std().item() / b.mean().item()) ** 2 / trials) ** 0.5,
                "baseline_bytes": b.mean().item(),
                "deamoe_bytes": d.mean().item(),
                "ratio_fp8": d8.mean().item() / b8.mean().item(),
                "baseline_bytes_fp8": b8.mean().item(),
                "deamoe_bytes_fp8": d8.mean().item(),
                "baseline_distinct_experts": b_experts,
                "baseline_distinct_experts_closed_form": closed,
                "deamoe_distinct_experts": d_experts,
                "deamoe_distinct_departments": d_depts,
                "trials": trials,
            }
        )
    return pd.DataFrame(rows)
