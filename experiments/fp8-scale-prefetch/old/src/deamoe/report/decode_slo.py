"""Figure 3 (right) at GPU scale: the largest batch each model sustains under a TPOT budget, from
the model-level decode step (decode_tpot.csv: a Baseline-7B-shaped decoder, random bf16 weights,
static KV cache, one CUDA graph per step) -- not a vLLM server: no scheduler, no prefill, no paged
attention, so the budgets are on the decode step alone.

Budgets as the paper chooses them: the TPOT at which the baseline sustains a given batch (the
paper's 20 ms and 30 ms on the A40 are where its baseline sustains 24 and 64), here at every
batch the baseline was measured at (a sweep), with the paper's two beside the rows at 24 and 64.
A model's sustained batch is its largest measured batch within the budget
(deamoe.serve.tables.max_concurrency, the serving stage's rule, with its linear interpolation to
the next measured batch).  DeaMoE's side is "measured" when a larger measured batch exceeds the
budget; otherwise its true batch may lie beyond the table and the row says which batch is missing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from deamoe import paper
from deamoe.report.annotate import footer, not_run_panel
from deamoe.report.artifact import NOT_RUN, Artifact
from deamoe.report.sources import microbench_source

KEY = "figure3_slo_decode"
REQUIRED = ("model", "batch", "baseline_tpot_ms", "deamoe_tpot_ms")
PAPER_BY_BASE = {base: (budget, dea, gain) for budget, base, dea, gain in paper.FIG3_SLO}


def _levels(df: pd.DataFrame, side: str) -> pd.DataFrame:
    tpot = df[f"{side}_tpot_ms"]
    return pd.DataFrame({"concurrency": df["batch"], "tpot_ms": tpot,
                         "output_tok_s": df["batch"] * 1e3 / tpot})


def slo_rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, budget = the baseline's TPOT at one of its measured batches)."""
    from deamoe.serve.tables import max_concurrency

    rows = []
    for model, d in df.groupby("model", sort=False):
        d = d.sort_values("batch")
        base, dea = _levels(d, "baseline"), _levels(d, "deamoe")
        for batch, budget in zip(d["batch"], d["baseline_tpot_ms"]):
            cb, tb, ib = max_concurrency(base, budget, "tpot_ms")
            cd, td, idea = max_concurrency(dea, budget, "tpot_ms")
            above = dea["concurrency"][dea["concurrency"] > (cd if cd == cd else 0)]
            side = ("measured" if len(above) else
                    f"not measured: needs a batch above {int(dea['concurrency'].max())}")
            if cd != cd:  # NaN: not even its smallest measured batch is within the budget
                side = f"measured: none within the budget (smallest {int(above.min())})"
            row = {"model": model, "budget": f"baseline TPOT at batch {int(batch)}",
                   "tpot_budget_ms": budget, "baseline_batch": cb, "deamoe_batch": cd,
                   "deamoe_next_batch": above.min() if len(above) else float("nan"),
                   "deamoe_interp_batch": idea, "batch_gain": cd / cb,
                   "interp_batch_gain": idea / ib, "throughput_gain": td / tb,
                   "deamoe_side": side}
            pb = PAPER_BY_BASE.get(int(batch))
            if pb:
                row.update(paper_a40_budget_ms=pb[0], paper_baseline_batch=int(batch),
                           paper_deamoe_batch=pb[1], paper_gain=pb[2])
            rows.append(row)
    return pd.DataFrame(rows)


def _gpu(df: pd.DataFrame) -> str:
    return str(df["gpu"].iloc[0]) if "gpu" in df.columns and len(df) else "a GPU"


def decode_slo(results: Path, measured: Path, profile: str | None) -> Artifact:
    src = microbench_source(results, measured, "decode_tpot.csv", REQUIRED, profile)
    title = "Figure 3 (right) at GPU scale: batch under a TPOT budget, model-level decode step"
    paper_note = "paper (A40, vLLM): " + "; ".join(
        f"{b} ms: batch {x} vs {y}, {g:.2f}x" for b, x, y, g in paper.FIG3_SLO)
    if not src.ok:
        table = pd.DataFrame(paper.FIG3_SLO, columns=["paper_a40_budget_ms", "paper_baseline_batch",
                                                      "paper_deamoe_batch", "paper_gain"])
        return Artifact(KEY, title, table.assign(reproduced=NOT_RUN), [src], [paper_note])
    df = src.frame
    title += f" on {_gpu(df)} (not a vLLM server)"
    table = slo_rows(df)
    d0 = df.iloc[0]
    shape = (f"{int(d0['layers'])} layers, {int(d0['heads'])} heads, KV cache {int(d0['context'])}, "
             f"vocab {int(d0['vocab'])}, " if "layers" in df.columns else "")
    notes = [src.reason] if src.reason else []
    notes += [
        f"the model-level decode step on {_gpu(df)}, not a vLLM server: a Baseline-7B-shaped "
        f"decoder ({shape}random bf16 weights, Baseline-7B and DeaMoE-7B FFN shapes), one CUDA "
        "graph per step; TPOT = median graph replay; no scheduler, prefill or paged attention",
        "budgets: the baseline's TPOT at each of its measured batches; the paper's budgets are "
        "those at which its baseline sustains batch 24 (20 ms) and 64 (30 ms) on the A40: they "
        "sit beside the rows at 24 and 64 (paper_* columns)",
        "batch_gain = DeaMoE's largest measured batch within the budget / the baseline's (the "
        "paper's 1.50x = 96/64); interp_batch_gain linear in TPOT to the next measured batch "
        "(the paper's 44 is such a value); throughput_gain = tokens/s at those batches",
        "deamoe_side 'not measured': DeaMoE still meets the budget at its largest measured "
        "batch, so its sustained batch lies beyond the table (measure larger decode batches: "
        "microbench.decode_batches)",
        paper_note,
    ]
    return Artifact(KEY, title, table, [src], notes, data=df)


def figure(art: Artifact):
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.6))
    t = art.table
    if art.data is not None:
        long = art.data.melt(id_vars=["model", "batch"], value_vars=["baseline_tpot_ms",
                             "deamoe_tpot_ms"], var_name="FFN", value_name="TPOT (ms)")
        long["FFN"] = long["FFN"].str.removesuffix("_tpot_ms")
        sns.lineplot(data=long, x="batch", y="TPOT (ms)", hue="FFN", marker="o", ax=left)
        for base, color in ((24, "C2"), (64, "C3")):
            hit = t[t["budget"] == f"baseline TPOT at batch {base}"]
            if len(hit):
                r = hit.iloc[0]
                left.axhline(r["tpot_budget_ms"], ls=":", color=color, lw=1,
                             label=f"budget = baseline @ {base}: DeaMoE {r['deamoe_batch']:g}")
        left.legend(fontsize=7)
        done = t["deamoe_side"] == "measured"
        for mask, style, label in ((done, "o-", "largest measured batch"),
                                   (~done, "o", "DeaMoE side not measured (lower bound)")):
            if mask.any():
                right.plot(t.loc[mask, "baseline_batch"], t.loc[mask, "batch_gain"], style,
                           color="C0", mfc="C0" if style == "o-" else "white", label=label)
        right.plot(t["baseline_batch"], t["interp_batch_gain"], "^:", color="C1",
                   label="interpolated to the next measured batch")
    else:
        not_run_panel(left, art)
    bases = sorted(PAPER_BY_BASE)
    right.plot(bases, [PAPER_BY_BASE[b][2] for b in bases], "s", color="0.5", ms=8,
               label="paper, A40 vLLM (20 / 30 ms)")
    right.axhline(1.0, color="0.7", lw=0.8)
    left.set_title("decode-step TPOT by batch", fontsize=10)
    right.set_title("batch gain under the budget", fontsize=10)
    right.set_xlabel("baseline's batch at the budget (budget = its TPOT there)")
    right.set_ylabel("DeaMoE batch / baseline batch")
    right.legend(fontsize=7)
    fig.suptitle(art.title, fontsize=11)
    footer(fig, art, "model-level decode step on a GPU (not a vLLM server); paper: vLLM on an A40")
    return fig
