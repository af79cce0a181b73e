"""Quality along the tokens axis: how DeaMoE's held-out gap to its baseline moves with training
length.

Rows are the pre-training rows of every length of a size: results/quality/<size>/runs.csv (the
size's own steps) and results/quality/<size>/<n>steps/runs.csv (pretrain.sizes.<size>.lengths),
else the committed ones under reports/measured/<gpu>/quality/.  Only rows that state the text
they trained on (corpus_tokens, data_sha256) take part, and per size only those of one corpus:
two lengths trained on different text are not points of one curve.  Every figure in the text is
computed from the rows; a trend carried past the longest measured length is labelled an
extrapolation, with its uncertainty.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from deamoe.paper import PRETRAIN_TOKENS_PER_PARAM as PAPER_TOKENS_PER_PARAM
from deamoe.report.annotate import footer, not_run_panel
from deamoe.report.artifact import NOT_RUN, Artifact
from deamoe.report.ladder import (HOW_TO_RUN, MODELS, OPERATOR_LABELS, load_gpu_rows, operator_of,
                                  paired_difference, per_seed_difference, quality_pairs, seed_spread,
                                  verdict)
from deamoe.report.sources import human, not_run

TITLE = "Quality along the tokens axis: held-out gap against training length, by size"
# the gap one length shorter over only the seeds this length has so far (a length part trained)
SAME_SEEDS = "same seeds' diff one length shorter"
REQUIRED = ("size", "model", "seed", "val_loss", "tokens", "params", "corpus_tokens", "data_sha256")


def axis_rows(results: Path, measured: Path, profile: str | None):
    """Every length's rows of every size (per table: this run's GPU rows, else the committed ones),
    with the sources they came from and the rows left out for another corpus."""
    pairs = quality_pairs(results, measured, ("quality/*/runs.csv", "quality/*/*steps/runs.csv"))
    rows, sources = load_gpu_rows(pairs, ("size", "model", "seed", "val_loss"), profile)
    if rows is None:
        return None, [], []
    known = rows.dropna(subset=[c for c in REQUIRED if c in rows.columns])
    if any(c not in rows.columns for c in REQUIRED) or known.empty:
        return None, sources, sorted(set(rows["size"]))
    kept = []
    for size, g in known.groupby("size", sort=False):
        corpus = g["data_sha256"].value_counts().index[0]  # the corpus most of the size's runs saw
        kept.append(g[g["data_sha256"] == corpus])
    out = pd.concat(kept, ignore_index=True)
    left = rows[~rows["run"].isin(out["run"])] if "run" in rows else rows.iloc[0:0]
    dropped = [f"{size} at {', '.join(str(int(n)) for n in sorted(g['steps'].unique()))} steps"
               for size, g in left.groupby("size", sort=False)]
    # the files behind the rows kept (a size left out is not a source of these numbers)
    used = [src for src in sources if "run" not in src.frame or src.frame["run"].isin(out["run"]).any()]
    return out, used or sources, dropped


def axis_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per size and length: both models' held-out loss over seeds and the paired
    difference (DeaMoE minus baseline, same seed) with its standard error and verdict."""
    out = []
    by = ["size", "tokens"]
    rows = rows.assign(tokens_per_param=rows["tokens"] / rows.groupby("size")["params"].transform("max"))
    spread = seed_spread(rows, "val_loss", by=(*by, "model")).set_index([*by, "model"])
    diff = paired_difference(rows, "val_loss", by=tuple(by)).set_index(by)
    # The training loss (last steps' batches) beside it: past one pass over the text the held-out
    # gap also measures how each model generalises from text it has seen more than once.
    train = (paired_difference(rows, "loss_last_n", by=tuple(by)).set_index(by)
             if "loss_last_n" in rows else pd.DataFrame())
    shorter = _same_seeds_shorter(rows)
    for (size, tokens), g in rows.groupby(by, sort=False):
        d = diff.loc[(size, tokens)] if (size, tokens) in diff.index else None
        m = lambda model, col: spread[col].get((size, tokens, model), math.nan)  # noqa: E731
        n = int(d["n"]) if d is not None else 0
        out.append({
            "size": size, "DeaMoE operator": operator_of(g), "steps": int(g["steps"].max()),
            "tokens": int(tokens), "tokens per param": g["tokens_per_param"].max(),
            "passes over corpus": g["epochs"].max(), "corpus tokens": int(g["corpus_tokens"].max()),
            "seeds": n,
            "baseline held-out": m("baseline", "mean"), "baseline std": m("baseline", "std"),
            "DeaMoE held-out": m("deamoe", "mean"), "DeaMoE std": m("deamoe", "std"),
            "diff DeaMoE - baseline": d["mean"] if d is not None else math.nan,
            "diff std": d["std"] if d is not None else math.nan,
            "diff 2 se": 2 * d["se"] if d is not None else math.nan,
            "verdict": verdict(d["mean"], d["se"], n) if d is not None else NOT_RUN,
            "train diff DeaMoE - baseline": train["mean"].get((size, tokens), math.nan) if len(train)
            else math.nan,
            "train diff 2 se": 2 * train["se"].get((size, tokens), math.nan) if len(train) else math.nan,
            SAME_SEEDS: shorter.get((size, tokens), math.nan),
        })
    table = pd.DataFrame(out)
    order = table.groupby("size")["tokens per param"].transform("min")
    return table.assign(_o=order).sort_values(["_o", "size", "tokens"]).drop(columns="_o").reset_index(drop=True)


def _same_seeds_shorter(rows: pd.DataFrame) -> dict:
    """(size, tokens) -> the gap one length shorter over this length's seeds only, where that
    length has more seeds: a length whose first seeds are trained is read beside what the same
    seeds did before, since a few seeds need not stand where all of them did."""
    diff = per_seed_difference(rows, "val_loss", by=("size", "tokens"))
    if diff is None:
        return {}
    per_seed = diff.set_index(["size", "tokens", "seed"])["diff"]
    out = {}
    for size, line in per_seed.groupby(level="size", sort=False):
        lengths = sorted(set(line.index.get_level_values("tokens")))
        for short, long in zip(lengths, lengths[1:]):
            here = set(line.loc[(size, long)].index)
            before = line.loc[(size, short)]
            if here < set(before.index):
                out[(size, long)] = float(before[sorted(here)].mean())
    return out


def _same_seeds_text(line: pd.DataFrame, row) -> str:
    """Where a length's seeds stood one length shorter, beside all that length's seeds."""
    gap = row.get(SAME_SEEDS, math.nan)
    if not math.isfinite(gap):
        return ""
    prev = line[line["tokens"] < row["tokens"]].iloc[-1]
    return (f" (the same {int(row['seeds'])} seed{'s' if row['seeds'] > 1 else ''} one length shorter, at "
            f"{prev['tokens per param']:.2g} tokens/param: {gap:+.3f}; all {int(prev['seeds'])} seeds "
            f"there: {prev['diff DeaMoE - baseline']:+.3f})")


def trend(line: pd.DataFrame, at: float) -> dict:
    """Weighted least squares of the gap on log10(tokens per parameter) over one line's lengths
    (weights 1 / se^2, se floored at the smallest measured), read at `at` tokens per parameter:
    {slope per decade, value, its standard error, extrapolated, zero_at: the tokens per parameter
    where the fitted line crosses zero (None for a flat line)}; empty below three lengths."""
    g = line.dropna(subset=["diff DeaMoE - baseline", "diff 2 se"])
    if len(g) < 3:
        return {}
    x = np.log10(g["tokens per param"].to_numpy(float))
    y = g["diff DeaMoE - baseline"].to_numpy(float)
    se = np.maximum(g["diff 2 se"].to_numpy(float) / 2, max(g["diff 2 se"].min() / 2, 1e-6))
    w = 1 / se**2
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    beta = cov @ design.T @ (w * y)
    resid = y - design @ beta
    # scatter beyond the seeds' errors widens the band (reduced chi-square, never below 1)
    scale = max(1.0, float(np.sum(w * resid**2) / (len(y) - 2)))
    point = np.array([1.0, math.log10(at)])
    return {"slope_per_decade": float(beta[1]), "value": float(point @ beta),
            "se": float(math.sqrt(point @ cov @ point * scale)),
            "extrapolated": not (x.min() <= math.log10(at) <= x.max()),
            "zero_at": 10 ** (-beta[0] / beta[1]) if abs(beta[1]) > 1e-12 else None}


def verdict_text(table: pd.DataFrame) -> str:
    """How the gap moves with training length and where it stands at the longest runs, per size
    and operator, from the table; a trend read at the paper's tokens per parameter beside it."""
    done = table[table["seeds"] > 0]
    if done.empty:
        return "The tokens axis is not run: no rows with their corpus stated."
    parts = []
    for (size, op), line in done.groupby(["size", "DeaMoE operator"], sort=False):
        line = line.sort_values("tokens")
        # the longest length with a spread is the one judged; a longer one of a single seed (the
        # first of a new length) is told beside it, not taken as the line's end
        judged = line[line["seeds"] > 1]
        last = judged.iloc[-1] if not judged.empty else line.iloc[-1]
        first = line.iloc[0]
        upto, beyond = line[line["tokens"] <= last["tokens"]], line[line["tokens"] > last["tokens"]]
        label = OPERATOR_LABELS.get(op, op)
        text = (f"{size} ({label}): gap {first['diff DeaMoE - baseline']:+.3f} at "
                f"{first['tokens per param']:.2g} tokens/param -> {gap_text(last)} at "
                f"{last['tokens per param']:.2g} ({last['passes over corpus']:.1f} passes over its text): "
                f"{last['verdict']}" + _same_seeds_text(line, last))
        if math.isfinite(last["train diff DeaMoE - baseline"]):
            text += f" (training-loss gap there {gap_text(last, 'train ')})"
        if len(upto) > 1 and last["seeds"] > 1 and first["seeds"] > 1:
            change = last["diff DeaMoE - baseline"] - first["diff DeaMoE - baseline"]
            noise = math.hypot(first["diff 2 se"], last["diff 2 se"])  # 2 se of the change
            toward = "toward zero" if abs(last["diff DeaMoE - baseline"]) < abs(first["diff DeaMoE - baseline"]) \
                else "away from zero"
            text += (f"; over {len(upto)} lengths the gap moves {change:+.3f} ({toward}), "
                     + ("beyond" if abs(change) > noise else "within") + f" seed noise (2 se {noise:.3f})")
        for _, row in beyond.iterrows():
            text += (f"; at {row['tokens per param']:.2g} tokens/param ({row['passes over corpus']:.1f} "
                     f"passes) {gap_text(row)}" + (f", training-loss gap {gap_text(row, 'train ')}"
                                               if math.isfinite(row["train diff DeaMoE - baseline"]) else "")
                     + ": no spread to judge it against yet" + _same_seeds_text(line, row))
        t = trend(line, PAPER_TOKENS_PER_PARAM)
        if t:
            kind = "extrapolation" if t["extrapolated"] else "interpolation"
            text += (f"; a log-linear trend ({t['slope_per_decade']:+.3f} nats per decade of tokens) "
                     f"gives {t['value']:+.3f} +- {2 * t['se']:.3f} at the paper's "
                     f"{PAPER_TOKENS_PER_PARAM:.0f} tokens/param ({kind})")
            gap = line.iloc[-1]["diff DeaMoE - baseline"]  # the longest measured, one seed or more
            if t["extrapolated"] and t["zero_at"] is not None and gap * t["value"] < 0:
                # the line crosses zero past the measured lengths: beyond where the gap closed,
                # a straight line in log-tokens says nothing about whether it changes sign
                text += (f", past the point where the line reaches zero ({t['zero_at']:.2g} "
                         "tokens/param): it does not say the gap would change sign")
        parts.append(text)
    return "DeaMoE minus baseline held-out loss along training length -- " + "; ".join(parts) + "."


def gap_text(row, of: str = "") -> str:
    """A line's gap at one length: mean +- 2 se over its seeds, or the one seed's difference."""
    mean, seeds = row[f"{of}diff DeaMoE - baseline"], int(row["seeds"])
    if seeds < 2 or not math.isfinite(row[f"{of}diff 2 se"]):
        return f"{mean:+.3f} (one seed)"
    return f"{mean:+.3f} +- {row[f'{of}diff 2 se']:.3f} (2 se, {seeds} seeds)"


def tokens_axis(results: Path, measured: Path, profile: str | None) -> Artifact:
    rows, sources, dropped = axis_rows(results, measured, profile)
    if rows is None:
        table = pd.DataFrame([{"size": NOT_RUN, "verdict": NOT_RUN}])
        why = ("no rows with their corpus stated (corpus_tokens, data_sha256): " + HOW_TO_RUN.format(
            gpu=Path(measured).name) + "; lengths: pretrain.sizes.<size>.lengths")
        return Artifact("tokens_axis", TITLE, table, [not_run(Path(measured) / "quality", why)], [why])
    table = axis_table(rows)
    notes = [verdict_text(table),
             "diff: DeaMoE minus baseline held-out loss on the same seed (same initialisation "
             "stream and batch order), mean, std and 2 standard errors over seeds; within seed "
             "noise: |mean diff| <= 2 standard errors; train diff: the same of the training loss "
             "over each run's last steps (past one pass, text the run has seen before). Every "
             "length is a complete cosine schedule of the same recipe; passes over corpus = training tokens / training corpus tokens "
             "(batches are windows at uniform random offsets); the held-out text is whole books "
             "no run trains on where val_split is documents",
             f"paper: 7.3B models on 110B tokens, about {PAPER_TOKENS_PER_PARAM:.0f} tokens per "
             "parameter; the ablation (5B) at about 2.5; no seed spread reported"]
    if dropped:
        notes.append("left out: rows that do not state their corpus (made before the tokens axis) or "
                     f"that trained on another corpus than the size's other lengths -- {'; '.join(dropped)}")
    return Artifact("tokens_axis", TITLE, table, sources, notes, rows=rows)


def _plain_log_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (18, 36; 131M), not powers of ten; between the
    decades only 2, 3 and 5 times one are labelled, so neighbours do not overlap."""
    from matplotlib.ticker import FuncFormatter

    plain = lambda v: human(v) if v >= 1e4 else f"{v:g}"  # noqa: E731
    major = FuncFormatter(lambda v, _: plain(v))
    minor = FuncFormatter(lambda v, _: plain(v) if round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5) else "")
    axis.set_major_formatter(major)
    axis.set_minor_formatter(minor)


def _line_label(size: str, op: str) -> str:
    return f"{size}, {OPERATOR_LABELS.get(op, op)}"


def gap_figure(art: Artifact):
    """The held-out gap against tokens per parameter (log axis), one line per size and operator,
    bars of 2 standard errors over seeds; the training-loss gap of the same runs beside each line,
    dashed and hollow (past one pass the two can part)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.6))
    t = art.table[art.table.get("seeds", pd.Series(dtype=float)).fillna(0) > 0] if art.rows is not None else None
    if t is not None and len(t):
        for i, ((size, op), line) in enumerate(t.groupby(["size", "DeaMoE operator"], sort=False)):
            line = line.sort_values("tokens per param")
            dodge = 1.015 ** i  # lines at the same lengths side by side, not on top of each other
            bars = ax.errorbar(line["tokens per param"] * dodge, line["diff DeaMoE - baseline"],
                               yerr=line["diff 2 se"], marker="o", ms=4, capsize=3, lw=1.2,
                               label=_line_label(size, op))
            train = line.dropna(subset=["train diff DeaMoE - baseline"])
            if len(train):
                ax.errorbar(train["tokens per param"] * dodge * 1.03, train["train diff DeaMoE - baseline"],
                            yerr=train["train diff 2 se"], marker="o", ms=4, mfc="none", capsize=2, lw=0.9,
                            ls="--", color=bars[0].get_color(), label="_training loss")  # the title says dashed
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
        ax.axvline(PAPER_TOKENS_PER_PARAM, color="0.55", lw=0.9, ls=":",
                   label=f"paper's 7.3B models ({PAPER_TOKENS_PER_PARAM:.0f} tokens/param)")
    else:
        not_run_panel(ax, art)
    ax.axhline(0.0, color="0.4", lw=0.9, ls="--", label="equal quality")
    ax.set_xlabel("training tokens per parameter (log)")
    ax.set_ylabel("loss, DeaMoE - baseline (nats)")
    ax.set_title("Gap against training length: held-out (solid), training loss (dashed);\n"
                 "each length a full cosine schedule, bars: 2 standard errors over seeds", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside the data
    footer(fig, art)
    return fig


def loss_figure(art: Artifact):
    """Held-out loss of both models against training tokens (log axis), one panel per size,
    one line per model (DeaMoE per operator), mean with 2 standard errors over seeds."""
    import matplotlib.pyplot as plt

    rows = art.rows
    panels = []  # one per decoder: a size and its operator variants share their baselines
    if rows is not None:
        rows = rows.assign(decoder=rows["h"].astype(str) + "x" + rows["num_hidden_layers"].astype(str))
        panels = list(rows.groupby("decoder")["params"].max().sort_values().index)
    width = max(7.5, 4.6 * len(panels))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(width, 4.6), squeeze=False)
    for ax, decoder in zip(axes[0], panels):
        r = rows[rows["decoder"] == decoder]
        if "trained_as" in r:  # a baseline shared by two sizes counts once
            r = r.drop_duplicates(subset=["trained_as"])
        for (model, op), g in r.groupby(["model", r["operator"].fillna("")], sort=False):
            s = seed_spread(g, "val_loss", by=("tokens",)).sort_values("tokens")
            label = "baseline" if model == "baseline" else f"DeaMoE {OPERATOR_LABELS.get(op, op)}"
            ax.errorbar(s["tokens"], s["mean"], yerr=2 * s["std"] / np.sqrt(s["n"]), marker="o", ms=3.5,
                        capsize=3, lw=1.1, label=label)
        size = ", ".join(sorted(set(r["size"])))
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
        ax.set_title(f"{size} ({r['params'].max() / 1e6:.1f}M params)", fontsize=10)
        ax.set_xlabel("training tokens (log)")
        ax.set_ylabel("held-out loss (nats)")
        ax.legend(fontsize=7)
    if not panels:
        not_run_panel(axes[0][0], art)
    fig.suptitle("Held-out loss against training tokens (bars: 2 standard errors over seeds)", fontsize=11)
    footer(fig, art)
    return fig


FIGURES = {"tokens_axis_gap": gap_figure, "tokens_axis_loss": loss_figure}
__all__ = ["tokens_axis", "axis_rows", "axis_table", "trend", "verdict_text", "FIGURES", "MODELS"]
