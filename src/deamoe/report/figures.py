"""The report's figures (seaborn; PNG + SVG): reproduced numbers beside the paper's.

Every figure carries a footer with the scale and hardware of its numbers; a stage that did not run
gives a panel that says "not run" and why, with the paper's values still drawn.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from deamoe.io import atomic_path  # noqa: E402
from deamoe import paper  # noqa: E402
from deamoe.shapes import SHARED_SUFFIX  # noqa: E402
from deamoe.report import decode_slo, fp8_panel, ladder, tokens_axis  # noqa: E402
from deamoe.report.annotate import footer, not_run_panel  # noqa: E402
from deamoe.report.artifact import Artifact  # noqa: E402
from deamoe.report.tables import tpot_metric  # noqa: E402

FIGURES = ("figure2_loading", "figure3_tpot", "figure3_slo_decode", "figure4_5_microbench",
           "figure4_5_fp8",
           "table4_loss_curves", "table4_gpu_loss_curves", "pretrain_loss_curves", "quality_gap",
           "quality_loss_curves", *tokens_axis.FIGURES)


def _save(fig, out_dir: Path, name: str, dpi: int) -> list[Path]:
    paths = []
    for ext in ("png", "svg"):
        path = Path(out_dir) / f"{name}.{ext}"
        # an SVG carries the time it was drawn and random element ids unless told otherwise: a
        # rebuild from the same results gives the same bytes (as the PNG does)
        svg = {"metadata": {"Date": None}} if ext == "svg" else {}
        with atomic_path(path) as tmp, plt.rc_context({"svg.hashsalt": name}):
            fig.savefig(tmp, dpi=dpi, format=ext, **svg)
        paths.append(path)
    plt.close(fig)
    return paths


def figure2(art: Artifact):
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    lo, hi = paper.FIG2_DSV3_BAND["ratio"]
    t0, t1 = paper.FIG2_DSV3_BAND["tokens"]
    ax.fill_between([t0, t1], lo, hi, color="0.85", label=f"paper: DeepSeek-V3 range {t0}-{t1} tokens")
    ax.axhline(paper.FIG2_MIN_RATIO, ls=":", color="0.4", label="paper: lowest ratio (49.1%)")
    if art.data is not None:
        # one colour per model; "<model>+shared" (its shared experts loaded by both layers) dashed
        shared = art.data["model"].str.endswith(SHARED_SUFFIX)
        data = art.data.assign(model=art.data["model"].str.removesuffix(SHARED_SUFFIX),
                               experts=shared.map({False: "routed only", True: "+ shared experts"}))
        sns.lineplot(data=data, x="tokens", y="ratio", hue="model", style="experts", marker="o",
                     style_order=["routed only", "+ shared experts"], ax=ax)
    else:
        not_run_panel(ax, art)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("tokens in the decoding step")
    ax.set_ylabel("loaded expert weights, DeaMoE / baseline")
    ax.set_title(art.title, fontsize=10)
    ax.legend(fontsize=7)
    footer(fig, art)
    return fig


def figure3(art: Artifact):
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    if art.data is not None:
        df = art.data.assign(model=art.data["model"].str.lower())
        metric = tpot_metric(df)
        sns.lineplot(data=df, x="concurrency", y=metric, hue="model", marker="o", ax=left)
        left.set_ylabel(f"TPOT, mean (ms; {metric})")
        left.set_xticks(sorted(df["concurrency"].unique()))
    else:
        not_run_panel(left, art)
    left.set_title("reproduced TPOT", fontsize=10)
    left.set_xlabel("concurrency")
    t = art.table
    paper_x = list(paper.FIG3_A40_SPEEDUP)
    right.plot(paper_x, [paper.FIG3_A40_SPEEDUP[c] for c in paper_x], "s--", color="0.5",
               label="paper, A40 (order inferred)")
    if "speedup" in t.columns and pd.api.types.is_numeric_dtype(t["speedup"]):
        right.plot(t["concurrency"], t["speedup"], "o-", color="C0", label="reproduced")
    right.axhline(1.0, color="0.7", lw=0.8)
    right.set_xlabel("concurrency")
    right.set_ylabel("TPOT speedup, DeaMoE over baseline")
    right.set_title("speedup", fontsize=10)
    right.legend(fontsize=7)
    fig.suptitle(art.title, fontsize=11)
    footer(fig, art)
    return fig


def _shared_curve(ax, data, model: str) -> None:
    """The "<model>+shared" layer (its shared experts in both layers) beside the routed-only one."""
    d = data[data["model"] == model + SHARED_SUFFIX].sort_values("batch")
    if not len(d):
        return
    ax.plot(d["batch"], d["baseline_us"] / d["deamoe_us"], "D--", color="C2",
            label=f"reproduced, {model}{SHARED_SUFFIX}")
    if "ideal_speedup" in d:
        ax.plot(d["batch"], d["ideal_speedup"], "v:", color="C3", label="ideal, + shared experts")


def figure45(art: Artifact):
    data = art.data
    extra = []  # models measured only with their shared experts get a panel of their own
    if data is not None:
        extra = [m.removesuffix(SHARED_SUFFIX) for m in dict.fromkeys(data["model"])
                 if m.endswith(SHARED_SUFFIX) and m.removesuffix(SHARED_SUFFIX) not in paper.FIG45_MODELS]
    panels = paper.FIG45_MODELS + tuple(extra)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.4), sharey=True)
    gpu = "measured"
    if data is not None and "gpu" in data.columns and len(data):
        gpu = str(data["gpu"].iloc[0])
    for ax, model in zip(axes, panels):
        for (pgpu, pmodel), values in paper.FIG45.items():
            if pmodel == model:
                ax.plot(list(values), list(values.values()), "s--", alpha=0.7,
                        color="0.55" if pgpu == "A40" else "0.3", label=f"paper, {pgpu}")
        for (pgpu, pmodel), peak in paper.FIG45_PEAKS.items():
            if pmodel == model:
                ax.axhline(peak, ls=":", color="0.55", label=f"paper, {pgpu} peak {peak:.2f}x")
        if data is not None:
            d = data[data["model"] == model].sort_values("batch")
            if len(d):
                speed = d["baseline_us"] / d["deamoe_us"]  # the times, as the table's
                ax.plot(d["batch"], speed, "o-", color="C0", label=f"reproduced, {gpu}")
                if "ideal_speedup" in d:
                    ax.plot(d["batch"], d["ideal_speedup"], "^:", color="C1",
                            label="ideal (bytes ratio), same routing")
            _shared_curve(ax, data, model)
        elif model == paper.FIG45_MODELS[0]:
            not_run_panel(ax, art)
        ax.axhline(1.0, color="0.7", lw=0.8)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("tokens per decoding step (batch)")
        ax.legend(fontsize=6.5)
    axes[0].set_ylabel("per-layer decode speedup, DeaMoE over baseline")
    fig.suptitle(art.title, fontsize=11)
    footer(fig, art, paper.FIG45_NOTE)
    return fig


def loss_curves(art: Artifact, title: str, paper_losses: dict[str, float] | None = None):
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    if art.data is not None:
        sns.lineplot(data=art.data, x="step", y="loss", hue="run", ax=ax, lw=1)
        ax.set_ylabel("training loss")
    else:
        not_run_panel(ax, art)
    extra = ""
    if paper_losses:
        extra = "paper (5B, 12.4B tokens) last-200-step losses: " + ", ".join(
            f"{k} {v:.3f}" for k, v in paper_losses.items())
    ax.set_xlabel("step")
    ax.set_title(title, fontsize=10)
    footer(fig, art, extra)
    return fig


def ablation_curves(art: Artifact, window: int = 500):
    """Table 4 at GPU scale: each variant's training loss (mean over seeds, +-1 std band) and,
    beside it, its difference to No.1 at the same seed (the same batches), each averaged over
    windows of `window` steps so the per-batch noise does not hide a lasting difference."""
    fig, (ax, diff_ax) = plt.subplots(1, 2, figsize=(11, 4.6))
    d = art.data
    if d is not None and {"variant", "seed", "step", "tokens", "loss"} <= set(d.columns):
        d = d.assign(window=(d["step"] - 1) // window)
        w = d.groupby(["variant", "seed", "window"], as_index=False).agg(tokens=("tokens", "max"),
                                                                          loss=("loss", "mean"))
        variants = sorted(w["variant"].unique())  # one colour per variant in both panels
        colours = dict(zip(variants, sns.color_palette(n_colors=len(variants))))
        sns.lineplot(data=w, x="tokens", y="loss", hue="variant", palette=colours, errorbar="sd",
                     lw=1, ax=ax)
        tail = w[w["window"] > w["window"].max() * 0.15]["loss"]
        ax.set_ylim(tail.min() - 0.02, tail.max() + 0.05)
        ref = w[w["variant"] == "No.1"].set_index(["seed", "window"])["loss"]
        v = w[w["variant"] != "No.1"].join(ref.rename("no1"), on=["seed", "window"]).dropna()
        sns.lineplot(data=v.assign(diff=v["loss"] - v["no1"]), x="tokens", y="diff", hue="variant",
                     palette=colours, errorbar="sd", lw=1, ax=diff_ax)
        diff_ax.axhline(0.0, color="0.4", lw=0.9, ls="--")
        diff_ax.set_ylabel("training loss minus No.1's, same seed (nats)")
        for a in (ax, diff_ax):
            a.set_xlabel("training tokens")
            a.legend(fontsize=7)
        ax.set_ylabel(f"training loss (mean of {window}-step windows)")
    else:
        not_run_panel(ax, art)
        diff_ax.set_visible(False)
    fig.suptitle("Table 4 at GPU scale: training loss per variant (bands: +-1 std over seeds)",
                 fontsize=11)
    footer(fig, art)
    return fig


def quality_gap(art: Artifact):
    """Held-out loss, DeaMoE minus baseline, against model size: each seed's pair as a point,
    the mean with a +-1 standard deviation bar over seeds."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    rows = art.rows
    pairs = None
    if rows is not None:
        params = rows[rows["model"] == "baseline"].groupby("size")["params"].max()
        pairs = ladder.per_seed_difference(rows, "val_loss")
        if pairs is not None:
            pairs["params"] = pairs["size"].map(params)
            ops = {size: ladder.operator_of(g) for size, g in rows.groupby("size")}
            pairs["DeaMoE operator"] = pairs["size"].map(
                lambda s: ladder.OPERATOR_LABELS.get(ops[s], ops[s]))
    if pairs is not None and len(pairs):
        # one line per DeaMoE operator: mean +- std over seeds (aggregated here: seaborn 0.13's
        # error bars hand matplotlib a one-element Series, which pandas deprecates), and each
        # seed's pair as a dot in the same colour
        ops = list(dict.fromkeys(pairs["DeaMoE operator"]))
        colours = dict(zip(ops, sns.color_palette(n_colors=len(ops))))
        for op, g in pairs.groupby("DeaMoE operator", sort=False):
            line = g.groupby("params")["diff"].agg(["mean", "std"]).reset_index()
            ax.errorbar(line["params"].to_numpy(), line["mean"].to_numpy(), yerr=line["std"].fillna(0).to_numpy(),
                        marker="o", capsize=4, color=colours[op], label=op)
        sns.scatterplot(data=pairs, x="params", y="diff", hue="DeaMoE operator", palette=colours, alpha=0.45,
                        s=22, legend=False, ax=ax)
        for size, x in pairs.groupby("size")["params"].first().items():
            ax.annotate(size, (x, pairs[pairs["size"] == size]["diff"].max()), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize=8)
        ax.set_xscale("log")
    else:
        not_run_panel(ax, art)
    ax.axhline(0.0, color="0.4", lw=0.9, ls="--", label="equal quality")
    ax.set_xlabel("total parameters (baseline of the pair)")
    ax.set_ylabel("held-out loss, DeaMoE - baseline (nats)")
    ax.set_title("Held-out loss gap against model size (same tokens, optimiser and seed per pair;\n"
                 "bars: +-1 std over seeds, dots: one seed's pair)", fontsize=10)
    ax.legend(fontsize=7, title="DeaMoE operator", title_fontsize=7)
    footer(fig, art)
    return fig


def ladder_curves(art: Artifact):
    """Training loss of each pair, one panel per size: mean over seeds with a +-1 std band."""
    data = art.data
    sizes = []
    if data is not None and art.rows is not None:  # a row per DeaMoE operator, smallest model first
        params = art.rows.groupby("size")["params"].max()
        ops = {s: ladder.operator_of(g) for s, g in art.rows.groupby("size")}
        sizes = sorted((s for s in params.index if s in set(data["size"])),
                       key=lambda s: (ops[s] != "silu", ops[s], params[s]))
    ncols = min(max(len(sizes), 1), 3)  # the ladder's three sizes per row
    nrows = max(1, -(-len(sizes) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 4.0 * nrows + 0.4), squeeze=False)
    for ax in axes.flat[max(len(sizes), 1):]:  # the grid's unused cells (one stays for "not run")
        ax.set_visible(False)
    for ax, size in zip(axes.flat, sizes):
        d = data[data["size"] == size]
        sns.lineplot(data=d, x="tokens", y="loss", hue="model", errorbar="sd", lw=0.9, ax=ax)
        tail = d[d["step"] > d["step"].max() * 0.1]["loss"]
        ax.set_ylim(tail.min() - 0.1, tail.quantile(0.99) + 0.2)
        op = ladder.operator_of(art.rows[art.rows["size"] == size])
        ax.set_title(f"{size}, DeaMoE {op} ({d['seed'].nunique()} seeds)", fontsize=10)
        ax.set_xlabel("training tokens")
        ax.set_ylabel("training loss")
    if not sizes:
        not_run_panel(axes[0][0], art)
    fig.suptitle("Pre-training at GPU scale: training loss per pair", fontsize=11)
    footer(fig, art)
    return fig


def draw_all(arts: dict[str, Artifact], out_dir: Path, dpi: int = 150) -> list[Path]:
    """Draw every figure in FIGURES (always all of them: the workflow declares each file)."""
    sns.set_theme(style="whitegrid", context="paper")
    paper_t4 = {v: loss for v, *_, loss in paper.TABLE4}
    figs = {
        "figure2_loading": figure2(arts["figure2"]),
        "figure3_tpot": figure3(arts["figure3"]),
        "figure3_slo_decode": decode_slo.figure(arts["figure3_slo_decode"]),
        "figure4_5_microbench": figure45(arts["figure4_5"]),
        "figure4_5_fp8": fp8_panel.figure(arts["figure4_5_fp8"]),
        "table4_loss_curves": loss_curves(arts["table4"], "Table 4: ablation variants, training loss", paper_t4),
        "table4_gpu_loss_curves": ablation_curves(arts["table4_gpu"]),
        "pretrain_loss_curves": loss_curves(arts["pretrain"], "Pre-training: DeaMoE vs baseline, training loss"),
        "quality_gap": quality_gap(arts["pretrain_gpu"]),
        "quality_loss_curves": ladder_curves(arts["pretrain_gpu"]),
        **{name: draw(arts["tokens_axis"]) for name, draw in tokens_axis.FIGURES.items()},
    }
    paths = []
    for name in FIGURES:
        paths += _save(figs[name], out_dir, name, dpi)
    return paths
