"""Table 1 recomputed: the paper's five configurations through the budget formula, plus the search.

Where a recomputed ratio disagrees with the paper's (after rounding to the paper's 3 decimals) the
row's `note` says so with the most likely cause, found by recomputing under the alternatives
(e.g. counting shared experts); the formula itself is never adjusted to match.
"""

from __future__ import annotations

import pandas as pd

from deamoe.analysis.budget import SearchSpace, budget, search, small_batch_loading_ratio
from deamoe.config import MoEShape, Table1Row, table1_row


def _agrees(value: float, paper: float) -> bool:
    return round(value, 3) == round(paper, 3)


def _explain_flops(row: Table1Row, flops_ratio: float) -> str:
    """Look for the baseline k_expert under which the paper's FLOPs ratio would come out."""
    base = row.baseline
    for k in range(1, 2 * base.k_expert + 1):
        alt = MoEShape(h=base.h, h_ffn=base.h_ffn, n_expert=base.n_expert, k_expert=k)
        if k != base.k_expert and _agrees(budget(alt, row.deamoe)["flops_ratio"], row.paper_flops_ratio):
            extra = k - base.k_expert
            return (
                f"recomputed FLOPs ratio {flops_ratio:.3f} != paper {row.paper_flops_ratio:.3f}; the "
                f"paper's value is what the formula gives for a baseline with k_expert={k} "
                f"({extra:+d} experts): most likely the paper counted {extra} shared expert(s) "
                f"in the baseline's FLOPs (the model activates {base.k_expert} routed + shared "
                "experts) while its parameter count used routed experts only"
            )
    return (
        f"recomputed FLOPs ratio {flops_ratio:.3f} != paper {row.paper_flops_ratio:.3f}; "
        "no single-field change explains it"
    )


def table1(models, space: SearchSpace = SearchSpace()) -> pd.DataFrame:
    rows = []
    for model in models:
        row = table1_row(model)
        base, dea = row.baseline, row.deamoe
        b = budget(base, dea)
        notes = []
        if not _agrees(b["flops_ratio"], row.paper_flops_ratio):
            notes.append(_explain_flops(row, b["flops_ratio"]))
        if not _agrees(b["params_ratio"], row.paper_params_ratio):
            notes.append(
                f"recomputed params ratio {b['params_ratio']:.3f} != paper {row.paper_params_ratio:.3f}"
            )
        found = search(base, space)
        best = found[0] if found else None
        rows.append(
            {
                "model": model,
                "h": base.h,
                "h_ffn": base.h_ffn,
                "n_expert": base.n_expert,
                "k_expert": base.k_expert,
                "n_dept": dea.n_dept,
                "dea_n_expert": dea.n_expert,
                "k_dept": dea.k_dept,
                "dea_k_expert": dea.k_expert,
                "flops_ratio": round(b["flops_ratio"], 4),
                "params_ratio": round(b["params_ratio"], 4),
                "paper_flops_ratio": row.paper_flops_ratio,
                "paper_params_ratio": row.paper_params_ratio,
                "flops_agrees": _agrees(b["flops_ratio"], row.paper_flops_ratio),
                "params_agrees": _agrees(b["params_ratio"], row.paper_params_ratio),
                "baseline_params": b["baseline_params"],
                "deamoe_params": b["deamoe_params"],
                "baseline_flops": b["baseline_flops"],
                "deamoe_flops": b["deamoe_flops"],
                "paper_config_small_batch_loading": round(small_batch_loading_ratio(base, dea, space.tokens), 4),
                "searched_n_dept": best["shape"].n_dept if best else None,
                "searched_n_expert": best["shape"].n_expert if best else None,
                "searched_k_dept": best["shape"].k_dept if best else None,
                "searched_k_expert": best["shape"].k_expert if best else None,
                "searched_flops_ratio": round(best["flops_ratio"], 4) if best else None,
                "searched_params_ratio": round(best["params_ratio"], 4) if best else None,
                "searched_small_batch_loading": round(best["loading_ratio"], 4) if best else None,
                "search_candidates": len(found),
                "search_objective": (
                    "min mean over tokens "
                    + "/".join(map(str, space.tokens))
                    + " of expected loaded weights DeaMoE/baseline (closed form, uniform routing)"
                ),
                "search_tolerance": space.tolerance,
                "note": "; ".join(notes),
            }
        )
    return pd.DataFrame(rows)
