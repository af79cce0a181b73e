"""Expected expert weights loaded per decoding step (Figure 2), by Monte Carlo.

A decoding step with T tokens must stream every expert (baseline), or every department backbone
and every private expert (DeaMoE), that at least one of the T tokens was routed to.  Router logits
are drawn i.i.d. standard normal (the paper's figure assumes no routing skew) and pushed through
deamoe.routing.route, the router the model itself uses; the baseline also has a closed form,
n (1 - (1 - k/n)^T) experts, reported beside the Monte Carlo value as a check.

Shared experts ("<model>+shared" presets) are loaded once per step by both layers: their bytes
are added to both, which pulls the ratio toward 1.
"""

from __future__ import annotations

import pandas as pd
import torch
from tqdm import tqdm

from deamoe.analysis.budget import loaded_expert_params, shared_params
from deamoe.shapes import DeaMoEShape, MoEShape, table1_row
from deamoe.routing import departments_of, route

BYTES_PER_PARAM = 2  # bf16 weights


def _distinct(ids: torch.Tensor, n: int) -> torch.Tensor:
    """ids [trials, T, k] -> [trials] number of distinct values."""
    trials = ids.shape[0]
    used = torch.zeros(trials, n, dtype=torch.bool)
    used.scatter_(1, ids.reshape(trials, -1), True)
    return used.sum(1).float()


def loaded_params(shape: MoEShape | DeaMoEShape, tokens: int, trials: int, gen: torch.Generator):
    """Monte Carlo: per-trial loaded expert parameters [trials] (shared experts included), plus
    mean distinct routed units."""
    logits = torch.randn(trials * tokens, shape.n_expert, generator=gen)
    ids, _ = route(shape, logits)
    ids = ids.view(trials, tokens, -1)
    experts = _distinct(ids, shape.n_expert)
    depts, mean_depts = 0, float("nan")
    if isinstance(shape, DeaMoEShape):
        depts = _distinct(departments_of(ids, shape.experts_per_dept), shape.n_dept)
        mean_depts = depts.mean().item()
    loaded = loaded_expert_params(shape, experts, depts)
    if shape.n_shared:
        loaded = loaded + shared_params(shape)
    return loaded, experts.mean().item(), mean_depts


def loading_table(models, tokens, trials: int = 64, seed: int = 0) -> pd.DataFrame:
    """Tidy table: one row per (model, tokens)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    points = [(m, t) for m in models for t in tokens]
    for model, t in tqdm(points, desc="loading", unit="point"):
        row = table1_row(model)
        base, dea = row.baseline, row.deamoe
        b, b_experts, _ = loaded_params(base, t, trials, gen)
        d, d_experts, d_depts = loaded_params(dea, t, trials, gen)
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
                "baseline_bytes": b.mean().item() * BYTES_PER_PARAM,
                "deamoe_bytes": d.mean().item() * BYTES_PER_PARAM,
                "baseline_distinct_experts": b_experts,
                "baseline_distinct_experts_closed_form": closed,
                "deamoe_distinct_experts": d_experts,
                "deamoe_distinct_departments": d_depts,
                "trials": trials,
            }
        )
    return pd.DataFrame(rows)
