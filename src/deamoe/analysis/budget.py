"""Parameter and per-token FLOP budget of an FFN layer (Table 1), and the budget-matched search.

Counted as the paper does (Section 3.3): the FFN's matrices plus the router (width = number of
experts).  FLOPs are 2 per multiply-accumulate of the matrix products a token goes through;
element-wise work (SiLU, sigma, the gate product, routing weights) is not counted.

  baseline  params = n_expert * 3 h h_ffn + h n_expert
            flops  = 2 (k_expert * 3 h h_ffn + h n_expert)
  DeaMoE    params = n_dept * 3 h h_ffn + n_expert * 3 h_ffn^2 + h n_expert
            flops  = 2 (k_dept * 3 h h_ffn + k_expert * 3 h_ffn^2 + h n_expert)
The DeaMoE FLOPs use k_dept, the cap on departments per token: soft routing may use fewer, so
this is the matched upper bound the paper describes.  A department computes only for the experts
a token picks in it, so with k_expert < k_dept (soft routing allows it) the cap is k_expert.

Shared experts (n_shared > 0) add the same term to both layers: params 3 h s, FLOPs 2 * 3 h s per
token, with s = shape.shared_ffn (n_shared * shared_mult * h_ffn); decoding loads them once per
step whatever the routing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.errors import ConfigError


def loaded_expert_params(shape: MoEShape | DeaMoEShape, experts, depts=0):
    """Expert parameters streamed when `experts` distinct experts (and, for DeaMoE, `depts`
    distinct departments) are used: a baseline expert or a department backbone is 3 h h_ffn, a
    DeaMoE private expert 3 h_ffn^2.  Counts may be ints, floats (expectations) or tensors."""
    if isinstance(shape, DeaMoEShape):
        return depts * 3 * shape.h * shape.h_ffn + experts * 3 * shape.h_ffn**2
    return experts * 3 * shape.h * shape.h_ffn


def loaded_expert_bytes(shape: MoEShape | DeaMoEShape, experts, depts=0, fp8=None):
    """Bytes streamed for `experts` distinct experts (and `depts` departments): 2 a parameter
    in bf16, or with `fp8` (a deamoe.kernels.fp8.Fp8Format) each matrix's e4m3 values and
    float32 block scales (Fp8Format.matrix_bytes: baseline experts and department backbones
    [h_ffn, h] x 2 + [h, h_ffn], private experts [h_ffn, h_ffn] x 3)."""
    if fp8 is None:
        return 2 * loaded_expert_params(shape, experts, depts)
    h, f, mb = shape.h, shape.h_ffn, fp8.matrix_bytes
    backbone = 2 * mb(f, h) + mb(h, f)
    if isinstance(shape, DeaMoEShape):
        return depts * backbone + experts * 3 * mb(f, f)
    return experts * backbone


def shared_bytes(shape: MoEShape | DeaMoEShape, fp8=None) -> int:
    """Bytes of the shared experts (gate, up [s, h], down [h, s]): bf16, or FP8 with scales."""
    if fp8 is None:
        return 2 * shared_params(shape)
    if not shape.n_shared:
        return 0
    s = shape.shared_ffn
    return 2 * fp8.matrix_bytes(s, shape.h) + fp8.matrix_bytes(shape.h, s)


def expert_params(shape: MoEShape | DeaMoEShape) -> int:
    """Parameters of the expert weights alone (what decoding streams from memory)."""
    return loaded_expert_params(shape, shape.n_expert, getattr(shape, "n_dept", 0))


def router_params(shape: MoEShape | DeaMoEShape) -> int:
    return shape.h * shape.n_expert


def shared_params(shape: MoEShape | DeaMoEShape) -> int:
    """Parameters of the always-active shared experts (gate, up, down of width shared_ffn)."""
    return 3 * shape.h * shape.shared_ffn


def ffn_params(shape: MoEShape | DeaMoEShape) -> int:
    """FFN + router parameters of one layer (shared experts included)."""
    return expert_params(shape) + router_params(shape) + shared_params(shape)


def ffn_flops(shape: MoEShape | DeaMoEShape) -> int:
    """FFN + router FLOPs for one token in one layer (2 per multiply-accumulate)."""
    router = shape.h * shape.n_expert
    if isinstance(shape, DeaMoEShape):
        depts = min(shape.k_dept, shape.k_expert)  # a department without a picked expert is skipped
        macs = depts * 3 * shape.h * shape.h_ffn + shape.k_expert * 3 * shape.h_ffn**2
    else:
        macs = shape.k_expert * 3 * shape.h * shape.h_ffn
    return 2 * (macs + router + shared_params(shape))


def budget(baseline: MoEShape, deamoe: DeaMoEShape) -> dict:
    """Absolute counts and DeaMoE / baseline ratios."""
    if baseline.h != deamoe.h or baseline.h_ffn != deamoe.h_ffn:
        raise ConfigError(
            f"budget: DeaMoE (h={deamoe.h}, h_ffn={deamoe.h_ffn}) must share h and h_ffn with the "
            f"baseline (h={baseline.h}, h_ffn={baseline.h_ffn})"
        )
    if (baseline.n_shared, baseline.shared_mult) != (deamoe.n_shared, deamoe.shared_mult):
        raise ConfigError(
            f"budget: DeaMoE (n_shared={deamoe.n_shared}, shared_mult={deamoe.shared_mult}) must "
            f"have the baseline's shared experts (n_shared={baseline.n_shared}, "
            f"shared_mult={baseline.shared_mult})"
        )
    bp, dp = ffn_params(baseline), ffn_params(deamoe)
    bf, df = ffn_flops(baseline), ffn_flops(deamoe)
    return {
        "baseline_params": bp,
        "deamoe_params": dp,
        "baseline_flops": bf,
        "deamoe_flops": df,
        "params_ratio": dp / bp,
        "flops_ratio": df / bf,
    }


# --- budget-matched search -----------------------------------------------------------------

SMALL_BATCH_TOKENS = (4, 8, 16, 32, 64)


def expected_loaded_params(shape: MoEShape | DeaMoEShape, tokens: int) -> float:
    """Closed-form expected expert parameters loaded in a step of `tokens` tokens.

    Assumes each token picks its experts uniformly at random (and, for DeaMoE, exactly k_dept
    departments: an upper bound for soft routing).  A unit is loaded when any token uses it.
    Used to rank search candidates; Figure 2 uses Monte Carlo through the real router.  Shared
    experts are loaded once per step by both layers.
    """
    experts = shape.n_expert * (1 - (1 - shape.k_expert / shape.n_expert) ** tokens)
    depts = 0.0
    if isinstance(shape, DeaMoEShape):
        depts = shape.n_dept * (1 - (1 - shape.k_dept / shape.n_dept) ** tokens)
    loaded = loaded_expert_params(shape, experts, depts)
    return loaded + shared_params(shape) if shape.n_shared else loaded


def small_batch_loading_ratio(
    baseline: MoEShape, deamoe: DeaMoEShape, tokens=SMALL_BATCH_TOKENS
) -> float:
    """Search objective: mean over `tokens` of expected DeaMoE / baseline loaded weights."""
    ratios = [expected_loaded_params(deamoe, t) / expected_loaded_params(baseline, t) for t in tokens]
    return sum(ratios) / len(ratios)


@dataclass(frozen=True)
class SearchSpace:
    """Where the search looks. Defaults follow the paper's Table 1 choices (n_dept 8 or 16)."""

    n_depts: tuple[int, ...] = (8, 16)
    # k_dept >= ceil(k_expert_baseline * k_dept_min_fraction): keep at least half of the baseline's
    # active backbone compute per token (without it the objective drives k_dept to 1).
    k_dept_min_fraction: float = 0.5
    k_expert_max: int = 16
    tolerance: float = 0.02  # |ratio - 1| allowed for both FLOPs and parameters
    tokens: tuple[int, ...] = SMALL_BATCH_TOKENS


def search(baseline: MoEShape, space: SearchSpace = SearchSpace()) -> list[dict]:
    """All budget-matched DeaMoE configurations, best (least small-batch loading) first.

    For each n_dept and k_dept, n_expert (a multiple of n_dept) is taken near the value that
    matches parameters, and k_expert near the value that matches FLOPs; every candidate within
    the tolerance on both ratios is kept.
    """
    h, f = baseline.h, baseline.h_ffn
    target_p, target_f = ffn_params(baseline), ffn_flops(baseline)
    shared = dict(n_shared=baseline.n_shared, shared_mult=baseline.shared_mult)
    found = []
    for d in space.n_depts:
        e_exact = (target_p - shared_params(baseline) - d * 3 * h * f) / (3 * f * f + h)
        if e_exact <= 0:
            continue
        for e in range(max(d, d * math.floor(e_exact * 0.9 / d)), d * math.ceil(e_exact * 1.1 / d) + 1, d):
            for kd in range(math.ceil(baseline.k_expert * space.k_dept_min_fraction), d + 1):
                for ke in range(kd, min(space.k_expert_max, (e // d) * kd) + 1):
                    try:
                        cand = DeaMoEShape(h=h, h_ffn=f, n_dept=d, n_expert=e, k_dept=kd, k_expert=ke,
                                           **shared)
                    except ConfigError:
                        continue
                    fr, pr = ffn_flops(cand) / target_f, ffn_params(cand) / target_p
                    if abs(fr - 1) <= space.tolerance and abs(pr - 1) <= space.tolerance:
                        found.append(
                            {
                                "shape": cand,
                                "flops_ratio": fr,
                                "params_ratio": pr,
                                "loading_ratio": small_batch_loading_ratio(baseline, cand, space.tokens),
                            }
                        )
    found.sort(key=lambda c: (c["loading_ratio"], abs(c["flops_ratio"] - 1) + abs(c["params_ratio"] - 1)))
    return found
