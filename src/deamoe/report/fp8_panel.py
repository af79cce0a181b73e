"""Figures 4/5 in FP8: both decode layers on block-scaled FP8 weights (deamoe.kernels.fp8), as
DeepSeek-V3 ships its experts, beside their bf16 rows and vLLM's FP8 fused MoE.

Reads the microbenchmark's FP8 table (microbench_fp8.csv: one row per model, weight precision
and batch, the columns of microbench.csv) -- this run's, else the committed H200 one, else "not
run" -- with the bf16 table's speedups beside it, and vLLM's FP8 block path from the FP8 rows of
the vllm_peer.csv beside that table where its peer run timed the table's own baseline picks.
Per row: time of both layers, DeaMoE's speedup, the ideal (bytes) speedup of the same routings
in FP8 (values + block scales), the fraction of it reached, and each layer's fraction of the
read roofline.  The FP8 tables committed from other GPUs (the sibling folders of the committed
one, e.g. reports/measured/h100/) follow as rows of their own, each row naming its chip, with
their own vLLM rows.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from deamoe import paper
from deamoe.errors import DataError
from deamoe.report.annotate import footer, not_run_panel
from deamoe.report.artifact import NOT_RUN, Artifact
from deamoe.report.sources import KERNEL_FP8, microbench_source, read_csv

KEY = "figure4_5_fp8"
TITLE = "Figures 4/5 in FP8: per-layer decode speedup on block-scaled FP8 weights"
REQUIRED = ("model", "weight_dtype", "batch", "baseline_us", "deamoe_us")
LABELS = {"fp8": "FP8 weights, bf16 activations", "fp8-w8a8": "FP8 weights and activations (w8a8)"}


def _bf16_speedups(results: Path, measured: Path, profile) -> dict:
    """{(model, batch): (speedup, speedup / ideal)} of the bf16 table beside it."""
    src = microbench_source(results, measured, "microbench.csv",
                            ("model", "batch", "baseline_us", "deamoe_us"), profile)
    if not src.ok or "ideal_speedup" not in src.frame:
        return {}
    f = src.frame
    speed = f["baseline_us"] / f["deamoe_us"]
    return {(m, int(b)): (s, s / i) for m, b, s, i in zip(f.model, f.batch, speed, f.ideal_speedup)}


def _vllm_fp8(fp8_table: Path, picks: pd.DataFrame) -> tuple[dict, list[str]]:
    """{(model, batch, precision): (vLLM routed us, ours routed us)} of the FP8 rows of the peer
    table beside `fp8_table`: only that one ran on the same GPU in the same run (a peer table
    elsewhere, this run's beside the committed FP8 table or the reverse, is another's).  A point
    where the peer's "ours" ran other baseline tiles than `picks` (the FP8 table's rows) name is
    left out, and the notes returned say so: the table's picks changed after the peer run, so
    that time is not this table's baseline beside vLLM."""
    src = read_csv(Path(fp8_table).with_name("vllm_peer.csv"),
                   required=("model", "batch", "variant", "us"))
    if not src.ok or "weight_dtype" not in src.frame:
        return {}, []
    f = src.frame[src.frame["weight_dtype"].notna()]
    us = f.pivot_table(index=["model", "batch", "weight_dtype"], columns="variant", values="us",
                       aggfunc="min")
    found = {(m, int(b), p): (r.get("vllm routed"), r.get("ours routed"))
             for (m, b, p), r in us.iterrows()}
    if "tile" not in f or "baseline_tile" not in picks:
        return found, []
    ours = f[f["variant"] == "ours routed"]
    timed = {(m, int(b), p): t
             for m, b, p, t in zip(ours.model, ours.batch, ours.weight_dtype, ours.tile)}
    picked = zip(picks.model, picks.batch, picks.weight_dtype, picks.baseline_tile)
    other = sorted((m, int(b), p) for m, b, p, t in picked
                   if (m, int(b), p) in timed and timed[(m, int(b), p)] != t)
    if not other:
        return found, []
    at = ours[[(m, int(b), p) in other
               for m, b, p in zip(ours.model, ours.batch, ours.weight_dtype)]]
    when = "; ".join(sorted({f"git {str(g)[:7]}, {str(d)[:10]}" for g, d in
                             zip(at.get("git_sha", ""), at.get("date", ""))}))
    return ({k: v for k, v in found.items() if k not in other},
            [f"vLLM FP8 not shown at {', '.join(f'{m} {p} @{b}' for m, b, p in other)}: "
             f"{src.path} ({when}) timed other baseline tiles there than {Path(fp8_table).name} "
             "picks (its picks changed after the peer run); `bench peer run --weight-dtype` on "
             "this table times both again"])


def _other_chips(measured: Path) -> list:
    """The FP8 tables committed from other GPUs: (table, its folder) of each sibling folder of
    `measured` that holds one.  A sibling that is a link to `measured` or to an earlier sibling
    (latest -> h200) is that folder: its rows are not another chip's."""
    root = Path(measured).parent
    if not Path(measured).is_dir() or not root.is_dir():
        return []
    found, seen = [], {Path(measured).resolve()}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        src = _fp8_only(read_csv(folder / "microbench_fp8.csv", REQUIRED, scale=KERNEL_FP8))  # absent: not ok
        if src.ok:
            found.append((src, folder))
    return found


def _rows(frame: pd.DataFrame, bf16: dict, peer: dict, chip: str = "not recorded") -> list[dict]:
    """The panel's rows of one FP8 table; `chip` names the GPU of a row without a gpu value
    (another chip's table: its folder, e.g. h100)."""
    rows = []
    for r in frame.to_dict("records"):
        key = (r["model"], int(r["batch"]))
        speedup = r["baseline_us"] / r["deamoe_us"]
        gpu = r.get("gpu")
        # "chip", not "gpu": the report shows a row's gpu once, as provenance, while this column
        # tells apart the rows of two chips in one table
        row = {"model": r["model"], "chip": gpu if isinstance(gpu, str) and gpu.strip() else chip,
               "weight_dtype": r["weight_dtype"], "batch": key[1],
               "baseline_us": r["baseline_us"], "deamoe_us": r["deamoe_us"], "speedup": speedup}
        if "ideal_speedup" in r:
            row.update({"ideal_speedup": r["ideal_speedup"],
                        "speedup / ideal": speedup / r["ideal_speedup"]})
        for kind in ("baseline", "deamoe"):
            if f"{kind}_frac_peak" in r:
                row[f"{kind} % read roofline"] = 100 * r[f"{kind}_frac_peak"]
        if key in bf16:
            row["bf16 speedup"], row["bf16 speedup / ideal"] = bf16[key]
        vllm, ours = peer.get((*key, r["weight_dtype"]), (None, None))
        if vllm is not None and ours is not None:
            row.update({"vLLM FP8 routed_us": vllm, "ours routed_us": ours,
                        "ours routed speed vs vLLM FP8": vllm / ours})
        rows.append(row)
    return rows


def _fp8_only(src):
    """`src` once each row's weight_dtype is an FP8 precision (LABELS): a row of another (bf16,
    a typo, a precision pasted in from elsewhere) was shown in the FP8 table without a word."""
    if src.ok:
        bad = ~src.frame["weight_dtype"].astype(str).isin(list(LABELS))
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise DataError(f"{src.path}:{i + 2}: column weight_dtype is {src.frame['weight_dtype'].iloc[i]!r}, "
                            f"not one of {', '.join(LABELS)} (an FP8 table)")
    return src


def figure45_fp8(results: Path, measured: Path, profile: str | None) -> Artifact:
    src = _fp8_only(microbench_source(results, measured, "microbench_fp8.csv", REQUIRED, profile, KERNEL_FP8))
    goals = ("goals on one H200: DeaMoE FP8 speedup >= 0.95 of the ideal (bytes) speedup for "
             "DeepSeek-V3 and Qwen3-235B-A22B at every batch 4-128, DeepSeek-V3 peak >= 1.9x; "
             "our FP8 baseline no slower than vLLM's FP8 fused MoE at every point and >= 90% of "
             "the read roofline for DeepSeek-V3 at >= 16 tokens")
    others = _other_chips(measured)
    if not src.ok and not others:
        table = pd.DataFrame({"weight_dtype": list(LABELS), "speedup": [NOT_RUN] * len(LABELS)})
        return Artifact(KEY, TITLE, table, [src], [goals])
    shown = [src] if src.ok else []  # without it, the other chips' rows alone (its reason noted)
    peer, stale = _vllm_fp8(src.path, src.frame) if src.ok else ({}, [])
    rows = _rows(src.frame, _bf16_speedups(results, measured, profile), peer) if src.ok else []
    notes = ([src.reason] if src.reason else []) + stale
    for other, folder in others:  # no bf16 speedup beside them: the bf16 table is another chip's
        peer, stale = _vllm_fp8(other.path, other.frame)
        theirs = _rows(other.frame, {}, peer, chip=folder.name)
        rows += theirs
        notes += stale
        notes.append(f"rows of {', '.join(sorted({r['chip'] for r in theirs}))} from the "
                     f"committed {other.path} (the vLLM rows from the peer table beside it); its "
                     "bf16 speedups are not shown (the bf16 table is another chip's)")
    notes += [
        "FP8: e4m3 values with one float32 scale per 128 x 128 block (DeepSeek-V3's format) for "
        "every FFN matrix of both layers (experts, departments, private experts, shared "
        "experts); the router stays bf16; activations bf16 in and out. 'fp8': weight-only, the "
        "MMA in bf16; 'fp8-w8a8': activations quantised per token and 128 columns, as vLLM's "
        "block path, the MMA on FP8 operands",
        "ideal speedup: the ratio of the FP8 bytes (values + scales) the two layers must load "
        "for the same routings; % read roofline against the streaming read measured in the "
        "same call",
        "vLLM FP8: vLLM's fused_moe_kernel on its FP8 block path (use_fp8_w8a8, block_shape "
        "[128, 128], its per-token-group quantiser before each GEMM) on the same GPU, weights "
        "and routings (the vllm_peer table's FP8 rows); speed vs vLLM > 1: ours is faster",
        goals]
    shown += [o for o, _ in others]
    return Artifact(KEY, TITLE, pd.DataFrame(rows), shown, notes,
                    data=pd.concat([s.frame for s in shown], ignore_index=True))


def figure(art: Artifact):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(paper.FIG45_MODELS), figsize=(4.4 * len(paper.FIG45_MODELS), 4.4),
                             sharey=True)
    t = art.table if art.data is not None else None
    for ax, model in zip(axes, paper.FIG45_MODELS):
        if t is not None and not (t["model"] == model).any():
            ax.text(0.5, 0.5, "not measured in FP8\n(no rows for this model)", ha="center",
                    va="center", transform=ax.transAxes, fontsize=9, color="0.4")
            ax.set_xticks([])
        elif t is not None:
            d = t[t["model"] == model]
            groups = d.groupby(["chip", "weight_dtype"], sort=False)
            for i, ((gpu, precision), g) in enumerate(groups):
                g = g.sort_values("batch")
                chip = f", {gpu}" if groups.ngroups > 1 else ""
                ax.plot(g["batch"], g["speedup"], "o-", color=f"C{2 * i}",
                        label=f"reproduced, {LABELS.get(precision, precision)}{chip}")
                if "ideal_speedup" in g:
                    ax.plot(g["batch"], g["ideal_speedup"], "^:", color=f"C{2 * i + 1}",
                            label=f"ideal (FP8 bytes), {precision}{chip}")
            if "bf16 speedup" in d and d["bf16 speedup"].notna().any():
                b = d.dropna(subset=["bf16 speedup"]).drop_duplicates("batch").sort_values("batch")
                ax.plot(b["batch"], b["bf16 speedup"], "s--", color="0.6", label="bf16 (Fig. 4/5)")
        elif model == paper.FIG45_MODELS[0]:
            not_run_panel(ax, art)
        ax.axhline(1.0, color="0.7", lw=0.8)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("tokens per decoding step (batch)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6.5)
    axes[0].set_ylabel("per-layer decode speedup, DeaMoE over baseline")
    fig.suptitle(art.title, fontsize=11)
    footer(fig, art, "both layers on the same block-scaled FP8 weights format; the bf16 curve "
                     "is Figures 4/5's")
    return fig
