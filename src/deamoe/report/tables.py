"""The report's tables: each paper artifact as reproduced numbers beside the paper's.

Each builder returns an `Artifact` (deamoe.report.artifact): the table to show, the files its numbers came from (with their
scale and hardware), notes, and a status ("ok", or "not run" with the reason; then the table
holds the paper's values alone so the reader still sees what the reproduction is aiming at).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from deamoe import paper
from deamoe.errors import absent
from deamoe.report.artifact import NOT_RUN, Artifact
from deamoe.report.shared_rows import shared_peer_note, shared_rows
from deamoe.report.sources import (ANALYTIC, KERNEL, curves_beside, microbench_source, read_csv,
                                   read_json, run_summaries)

def table1(results: Path, profile: str | None) -> Artifact:
    from deamoe.shapes import TABLE1

    src = read_csv(results / "analysis" / "table1.csv",
                   required=("model", "flops_ratio", "params_ratio"), profile=profile,
                   scale=ANALYTIC)
    cols = ["model", "h", "h_ffn", "n_expert", "k_expert", "n_shared", "n_dept", "dea_n_expert",
            "k_dept", "dea_k_expert", "flops_ratio", "paper_flops_ratio", "params_ratio",
            "paper_params_ratio", "note"]
    notes = ["ratios are DeaMoE / baseline FFN+router FLOPs and parameters; "
             "paper_* columns are the paper's"]
    if src.ok:
        table = src.frame[[c for c in cols if c in src.frame.columns]].copy()
        if "searched_n_expert" in src.frame.columns:
            f = src.frame
            # The search's pick beside the paper's configuration (same budget tolerance).
            table["searched (n_dept/n_expert/k_dept/k_expert)"] = [
                f"{int(d)}/{int(e)}/{int(kd)}/{int(ke)}" if pd.notna(e) else "none in tolerance"
                for d, e, kd, ke in zip(f.searched_n_dept, f.searched_n_expert,
                                        f.searched_k_dept, f.searched_k_expert)]
            table["small-batch loading: paper config"] = f.paper_config_small_batch_loading
            table["small-batch loading: searched"] = f.searched_small_batch_loading
            notes.append(f"search: {f.search_objective.iloc[0]}; budget tolerance "
                         f"+-{f.search_tolerance.iloc[0]:.0%} on both ratios")
    else:
        table = pd.DataFrame([{
            "model": r.model, "h": r.baseline.h, "h_ffn": r.baseline.h_ffn,
            "n_expert": r.baseline.n_expert, "k_expert": r.baseline.k_expert,
            "n_dept": r.deamoe.n_dept, "dea_n_expert": r.deamoe.n_expert,
            "k_dept": r.deamoe.k_dept, "dea_k_expert": r.deamoe.k_expert,
            "flops_ratio": NOT_RUN, "paper_flops_ratio": r.paper_flops_ratio,
            "params_ratio": NOT_RUN, "paper_params_ratio": r.paper_params_ratio,
        } for r in TABLE1.values()])
    return Artifact("table1", "Table 1: budget-matched DeaMoE configurations", table, [src], notes)


def figure2(results: Path, profile: str | None) -> Artifact:
    src = read_csv(results / "analysis" / "loading.csv", required=("model", "tokens", "ratio"),
                   profile=profile, scale=ANALYTIC)
    lo, hi = paper.FIG2_DSV3_BAND["ratio"]
    t0, t1 = paper.FIG2_DSV3_BAND["tokens"]
    if src.ok:
        table = src.frame.pivot_table(index="tokens", columns="model", values="ratio").reset_index()
        table.columns.name = None
    else:
        table = pd.DataFrame({"tokens": [t0, t1], "reproduced": [NOT_RUN, NOT_RUN]})
    notes = [f"paper (text): DeepSeek-V3 ratio within {lo:.1%}..{hi:.1%} for {t0}..{t1} tokens; "
             f"largest reduction {1 - paper.FIG2_MIN_RATIO:.1%}"]
    if src.ok and "ratio_fp8" in src.frame:
        f = src.frame
        notes.append("in FP8 (e4m3 values and a float32 scale per 128 x 128 block, as "
                     "DeepSeek-V3 ships its experts; the same routings): ratio "
                     f"{f.ratio_fp8.min():.3f}..{f.ratio_fp8.max():.3f} (bf16 "
                     f"{f.ratio.min():.3f}..{f.ratio.max():.3f}); FP8 bytes "
                     f"{(f.baseline_bytes_fp8 / f.baseline_bytes).max():.4f} of bf16's at most "
                     "(loading.csv: *_bytes_fp8)")
    return Artifact("figure2", "Figure 2: expected loaded expert weights per step, DeaMoE / "
                    "baseline", table, [src], notes, data=src.frame)


def table2(results: Path, profile: str | None, pretrained: list[dict]) -> Artifact:
    src = read_csv(results / "eval" / "downstream.csv", required=("model", "task", "value"),
                   profile=profile, scale_records=pretrained)
    rows = []
    if src.ok:
        df = src.frame.copy()
        df["metric"] = df["metric"] if "metric" in df.columns else "acc"
        scale = 100.0 if df["value"].abs().max() <= 1.0 else 1.0  # fractions -> percent
        for (task, metric), grp in df.groupby(["task", "metric"], sort=False):
            row = {"task": task, "metric": metric}
            for model in ("deamoe", "baseline"):
                g = grp[grp["model"].str.lower() == model]
                row[f"{model} reproduced"] = g["value"].iloc[0] * scale if len(g) else None
                if "stderr" in g.columns:
                    row[f"{model} stderr"] = g["stderr"].iloc[0] * scale if len(g) else None
                given = g["paper_value"].iloc[0] if "paper_value" in g.columns and len(g) else None
                if given is None or pd.isna(given):
                    given = paper.TABLE2[model].get(paper.paper_key(task))
                elif given <= 1.0:
                    given *= 100.0
                row[f"{model} paper"] = given
            rows.append(row)
    else:
        rows = _not_run_rows("task", "acc", paper.TABLE2)
    return Artifact("table2", "Table 2: downstream accuracy (%)", pd.DataFrame(rows), [src],
                    [paper.PAPER_SCALE["table2"], "reproduced: lm-evaluation-harness on the "
                     "pre-training stage's checkpoints; acc and acc_norm both shown where the "
                     "harness gives both"])


def _not_run_rows(key: str, metric: str, values: dict) -> list[dict]:
    """Table 2 or 3 without results: one "not run" row per task or dataset, the paper's beside."""
    return [{key: name, "metric": metric,
             **{c: v for m in ("deamoe", "baseline")
                for c, v in ((f"{m} reproduced", NOT_RUN), (f"{m} paper", values[m][name]))}}
            for name in values["deamoe"]]


def table3(results: Path, profile: str | None, pretrained: list[dict]) -> Artifact:
    metric = "word_perplexity"  # what eval-tables writes (a table without it: named by read_csv)
    src = read_csv(results / "eval" / "perplexity.csv", required=("model", "dataset", metric),
                   profile=profile, scale_records=pretrained)
    rows = []
    if src.ok:
        df = src.frame
        for dataset, grp in df.groupby("dataset", sort=False):
            row = {"dataset": dataset, "metric": metric}
            for model in ("deamoe", "baseline"):
                g = grp[grp["model"].str.lower() == model]
                row[f"{model} reproduced"] = g[metric].iloc[0] if len(g) else None
                given = g["paper_value"].iloc[0] if "paper_value" in g.columns and len(g) else None
                row[f"{model} paper"] = (given if given is not None and pd.notna(given)
                                         else paper.TABLE3[model].get(paper.paper_key(dataset)))
            rows.append(row)
    else:
        rows = _not_run_rows("dataset", metric, paper.TABLE3)
    return Artifact("table3", "Table 3: perplexity (lower is better)", pd.DataFrame(rows), [src],
                    [paper.PAPER_SCALE["table3"]])


def _runs(results: Path, kind: str) -> list[str]:
    """The training runs behind the tables of one kind (ablation, pretrain): those its stage's
    summary (results/<kind>/summary.csv) names, each by the folder it was trained in
    (`trained_as`: Table 4's No.1 is a pre-training run); where there is no such summary, every
    run folder of that kind under results/train.  Not the folders alone: one left from an earlier
    config (a seed or variant since dropped) or a run stopped half-way would be counted in the
    model size and tokens of a table whose rows are other runs."""
    src = read_csv(Path(results) / kind / "summary.csv")
    if not (src.ok and "run" in src.frame.columns):  # (a summary that names no runs: all folders)
        return sorted(p.name for p in (Path(results) / "train").glob(f"{kind}-*") if p.is_dir())
    named = src.frame.get("trained_as", src.frame["run"]).fillna(src.frame["run"])
    return list(dict.fromkeys(str(r) for r in named))


def pretrain_summaries(results: Path) -> list[dict]:
    """The summary.json records of the pre-training runs (_runs): the model size and tokens of
    the tables made from them (`pretrained` of table2, table3, pretrain, figure3, figure3_slo)."""
    return run_summaries(results, _runs(results, "pretrain"))


def table4(results: Path, profile: str | None) -> Artifact:
    src = read_csv(results / "ablation" / "summary.csv", required=("variant", "loss_last_n"),
                   profile=profile, scale_records=run_summaries(results, _runs(results, "ablation")))
    paper_rows = pd.DataFrame(paper.TABLE4, columns=["variant", "operator", "init", "dept_topk",
                                                     "paper_loss"])
    if src.ok:
        table = src.frame.copy()
        if "paper_loss" not in table.columns:
            table = table.merge(paper_rows[["variant", "paper_loss"]], on="variant", how="left")
        keep = ["variant", "operator", "init", "dept_topk", "loss_last_n", "paper_loss",
                "val_loss", "mean_distinct_departments", "paper_mean_distinct_departments",
                "last_n", "steps", "tokens"]
        table = table[[c for c in keep if c in table.columns]]
    else:
        table = paper_rows.assign(loss_last_n=NOT_RUN)[
            ["variant", "operator", "init", "dept_topk", "loss_last_n", "paper_loss"]]
    # the curves the ablation stage wrote beside its table: the table's runs, no others
    return Artifact("table4", "Table 4: ablation, mean training loss over the last N steps",
                    table, [src], [paper.TABLE4_SCALE], data=curves_beside([src]))


def pretrain(results: Path, profile: str | None, pretrained: list[dict]) -> Artifact:
    src = read_csv(results / "pretrain" / "summary.csv", profile=profile,
                   scale_records=pretrained)
    table = src.frame if src.ok else pd.DataFrame({"model": ["deamoe", "baseline"],
                                                   "final loss": [NOT_RUN, NOT_RUN]})
    return Artifact("pretrain", "Pre-training: DeaMoE vs budget-matched baseline", table, [src],
                    ["same data, optimiser, schedule and seed for both models"],
                    data=curves_beside([src]))


def tpot_metric(df: pd.DataFrame) -> str:
    """The TPOT column the serving stage compared (serve.slo_metric), e.g. vLLM's server-side
    TPOT on a loaded CPU where client-side timing is unreliable; tpot_mean_ms if not recorded."""
    if "speedup_metric" in df.columns and df["speedup_metric"].notna().any():
        metric = str(df["speedup_metric"].dropna().iloc[0])
        if metric in df.columns:
            return metric
    return "tpot_mean_ms"


def figure3(results: Path, profile: str | None, pretrained: list[dict]) -> Artifact:
    src = read_csv(results / "serve" / "tpot.csv",
                   required=("model", "concurrency", "tpot_mean_ms"), profile=profile,
                   scale_records=pretrained)
    if src.ok:
        df = src.frame.assign(model=lambda d: d["model"].str.lower())
        metric = tpot_metric(df)
        wide = df.pivot_table(index="concurrency", columns="model", values=metric)
        table = pd.DataFrame({"concurrency": wide.index, "tpot metric": metric})
        for model in ("baseline", "deamoe"):
            table[f"{model} TPOT ms"] = wide[model].values if model in wide else None
        if {"baseline", "deamoe"} <= set(wide.columns):
            table["speedup"] = (wide["baseline"] / wide["deamoe"]).values
    else:
        table = pd.DataFrame({"concurrency": list(paper.BATCHES), "speedup": NOT_RUN})
    table["paper A40 speedup"] = table["concurrency"].map(paper.FIG3_A40_SPEEDUP)
    return Artifact("figure3", "Figure 3: vLLM serving TPOT, DeaMoE vs baseline", table, [src],
                    [paper.PAPER_SCALE["figure3"], paper.FIG3_ORDER_NOTE],
                    data=src.frame)


def figure3_slo(results: Path, profile: str | None, pretrained: list[dict]) -> Artifact:
    src = read_csv(results / "serve" / "slo.csv", profile=profile,
                   scale_records=pretrained)
    paper_rows = pd.DataFrame(paper.FIG3_SLO, columns=["tpot_budget_ms", "paper baseline batch",
                                                       "paper deamoe batch", "paper gain"])
    if src.ok:
        # the comparison itself; the stage's CSV keeps the interpolated and per-level details
        keep = ["tpot_budget_ms", "slo_metric", "baseline_max_concurrency",
                "deamoe_max_concurrency", "baseline_output_tok_s", "deamoe_output_tok_s",
                "throughput_gain", "paper_tpot_budget_ms", "paper_baseline_concurrency",
                "paper_deamoe_concurrency", "paper_throughput_gain"]
        cols = [c for c in keep if c in src.frame.columns]
        table = src.frame[cols].copy() if len(cols) >= 3 else src.frame.copy()
    else:
        table = paper_rows.assign(reproduced=NOT_RUN)
    return Artifact("figure3_slo", "Figure 3 (right): throughput under a TPOT budget", table,
                    [src], ["paper (A40): " + "; ".join(
                        f"{b} ms: batch {x} vs {y}, {g:.2f}x" for b, x, y, g in paper.FIG3_SLO)])


def _read_sizes_note(path: Path) -> str | None:
    """One line from the committed streaming read by read size: what ONE launch of N bytes
    reaches, i.e. the per-launch floor under every GEMM of a layer (a malformed table: a
    DataError naming it, as every committed table read)."""
    if absent(path):
        return None
    df = read_csv(path).frame
    best = df.groupby("mb")["tbps"].max()
    where = f"{df['gpu'].iloc[0]}, {str(df['date'].iloc[0])[:10]}" if {"gpu", "date"} <= set(df) else "GPU"
    parts = ", ".join(f"{mb:g} MiB {tbps:.2f} TB/s" for mb, tbps in best.items())
    return (f"streaming read, one launch per read ({where}; {path}): {parts}; a layer of "
            "several launches (DeaMoE 4 GEMMs, baseline 2) cannot beat the sum of its "
            "launches' reads at these sizes")


def _roofline_note(frame: pd.DataFrame) -> str:
    """Which streaming-read roofline each model's rows were measured against: the rows of one
    table may come from several device calls, i.e. several lent GPUs of one type (e.g. 4.57 vs
    4.65 TB/s), and a model's ratios move with the chip."""
    peaks = frame.groupby("model", sort=False)["peak_read_tbps"].agg(["min", "max"])
    parts = [f"{m} {lo:.3f}" if abs(hi - lo) < 5e-4 else f"{m} {lo:.3f}-{hi:.3f}"
             for m, (lo, hi) in peaks.iterrows()]
    return ("streaming-read roofline measured in the same call as each row (TB/s; the "
            "% read roofline columns divide by it): " + ", ".join(parts))


def figure45(results: Path, measured: Path, profile: str | None) -> Artifact:
    src = microbench_source(results, measured, "microbench.csv",
                             ("model", "batch", "baseline_us", "deamoe_us"), profile)
    src, shared_src, shared_note = shared_rows(src, measured, KERNEL)
    rows = []
    if src.ok:
        df = src.frame.copy()
        # from the times, never the table's own column: an edited, stale or empty one would be
        # shown (and read by the headline) against the times beside it
        df["speedup"] = df["baseline_us"] / df["deamoe_us"]
        for _, r in df.iterrows():
            row = {"model": r["model"], "batch": int(r["batch"]),
                   "baseline_us": r["baseline_us"], "deamoe_us": r["deamoe_us"],
                   "speedup": r["speedup"]}
            if "ideal_speedup" in df.columns:
                row["ideal_speedup"] = r["ideal_speedup"]
                row["speedup / ideal"] = r["speedup"] / r["ideal_speedup"]
            for kind in ("baseline", "deamoe"):  # achieved read bandwidth / measured roofline
                if f"{kind}_frac_peak" in df.columns:
                    row[f"{kind} % read roofline"] = 100 * r[f"{kind}_frac_peak"]
            vllm = next((c for c in df.columns if c.startswith("vllm_") and c.endswith("_us")), None)
            if vllm and pd.notna(r[vllm]):
                # the peer: vLLM's own fused-MoE kernel on the same GPU (>1: ours is faster)
                row["vLLM baseline_us"] = r[vllm]
                row["baseline speed vs vLLM"] = r[vllm] / r["baseline_us"]
                if pd.notna(r.get("baseline_from_logits_us")):
                    # like for like: vLLM's fused_moe starts from the router logits
                    row["baseline from logits_us"] = r["baseline_from_logits_us"]
                    row["from logits speed vs vLLM"] = r[vllm] / r["baseline_from_logits_us"]
                row["deamoe speedup over vLLM"] = r[vllm] / r["deamoe_us"]
                if {"baseline_bytes", "peak_read_tbps"} <= set(df.columns):
                    # vLLM's time for the same routings' bytes, against this row's chip: both
                    # times average many random routings, so the bytes compare;
                    # > 100% means vLLM's time came from a faster chip than this row's
                    row["vLLM % read roofline here"] = (
                        100 * r["baseline_bytes"] / r[vllm] / 1e6 / r["peak_read_tbps"])
            for gpu in ("A40", "H100"):
                row[f"paper {gpu}"] = paper.FIG45.get((gpu, r["model"]), {}).get(int(r["batch"]))
            rows.append(row)
    else:
        for (gpu, model), values in paper.FIG45.items():
            for batch, v in values.items():
                rows.append({"model": model, "batch": batch, "speedup": NOT_RUN,
                             f"paper {gpu}": v})
    notes = [paper.PAPER_SCALE["figure45"], paper.FIG45_NOTE, shared_note]
    if src.ok and src.reason:
        notes.insert(0, src.reason)
    if src.ok and "baseline_layers_per_graph" in src.frame.columns:
        layers = src.frame[["baseline_layers_per_graph", "deamoe_layers_per_graph"]]
        lo, hi = int(layers.min().min()), int(layers.max().max())
        span = str(lo) if lo == hi else f"{lo}-{hi}"
        notes.append(f"per-layer times: median over CUDA-graph replays of {span} layer steps each"
                     " (rotated weight copies, beyond L2), so a graph launch is "
                     "shared as in a model's decode step; every layer step of every replay "
                     "routes a fresh random input, as vLLM's benchmark_moe draws a gating "
                     "output per replay, and the bytes are the mean over those routings")
    if src.ok and "peak_read_tbps" in src.frame.columns:
        notes.append(_roofline_note(src.frame))
    if src.ok and "baseline_from_logits_us" in src.frame.columns:
        notes.append("vLLM's times are of its fused_moe call, which starts from the router "
                     "logits; 'baseline speed vs vLLM' keeps our router GEMM in, 'from logits "
                     "speed vs vLLM' times our baseline step from the logits too (same picks)")
    if any("vLLM % read roofline here" in row for row in rows):
        notes.append("'vLLM % read roofline here': the read bandwidth vLLM's time would mean "
                     "for the same bytes on this row's GPU, as a % of its measured roofline; "
                     "above 100, that time was measured on a faster chip of the same type "
                     "(the lent H200s read at 4.57-4.65 TB/s)")
    if not absent(measured / "vllm_peer.csv"):
        notes.append("vLLM's own kernel, timed on the same GPU and routings as our baseline: "
                     "the vllm_peer table (reports/tables/vllm_peer.md)")
    sizes = _read_sizes_note(measured / "read_sizes.csv")
    if src.ok and sizes:
        notes.append(sizes)
    return Artifact("figure4_5", "Figures 4/5: per-layer decode speedup, DeaMoE over baseline",
                    pd.DataFrame(rows), [src, *filter(None, [shared_src])], notes, data=src.frame)


def vllm_peer(results: Path, measured: Path, profile: str | None) -> Artifact:
    """The peer of our baseline on the same GPU: vLLM's own fused-MoE Triton kernel
    (copied verbatim from an installed vLLM) timed beside our baseline on the same layer copies
    and routings (deamoe.bench.vllm_peer): this run's microbench part when it had
    a GPU and vLLM, else the committed table."""
    src = microbench_source(results, measured, "vllm_peer.csv",
                             ("model", "batch", "variant", "us", "bytes", "peak_read_tbps"),
                             profile)
    part = ((read_json(results / "microbench" / "status.json") or {}).get("parts") or {}).get(
        "vllm_peer") or {}
    if src.ok and src.reason and part.get("reason"):
        src.reason = (f"this run: {part.get('status', 'not run')} ({part['reason']}); showing "
                      f"committed {measured / 'vllm_peer.csv'}")
    if not src.ok:
        src.reason += ("; the microbench rule makes it on a CUDA GPU with vLLM installed "
                       "(or `python -m deamoe bench peer`)")
        return Artifact("vllm_peer", "vLLM's fused MoE beside our baseline on the same GPU",
                        pd.DataFrame({"vLLM kernel on the same GPU": [NOT_RUN]}), [src])
    df = src.frame
    if "weight_dtype" in df:  # FP8 rows: the FP8 panel's (report/fp8_panel.py)
        df = df[df["weight_dtype"].isna() | (df["weight_dtype"] == "bf16")]
    us = df.pivot_table(index=["model", "batch"], columns="variant", values="us",
                        aggfunc="first", sort=False)
    first = df.groupby(["model", "batch"], sort=False).first()
    peer = df[df["variant"] == "vllm routed"].set_index(["model", "batch"])
    rows = []
    for (model, batch), t in us.iterrows():
        f = first.loc[(model, batch)]
        gbs = f["bytes"] / 1e6 / f["peak_read_tbps"]  # us at the measured read roofline
        row = {"model": model, "batch": int(batch),
               "ours from logits_us": t.get("ours logits"), "ours routed_us": t.get("ours routed"),
               "vLLM routed_us": t.get("vllm routed")}
        row["ours routed speed vs vLLM"] = row["vLLM routed_us"] / row["ours routed_us"]
        row["ours from logits speed vs vLLM"] = row["vLLM routed_us"] / row["ours from logits_us"]
        row["ours routed % read roofline"] = 100 * gbs / row["ours routed_us"]
        row["vLLM % read roofline"] = 100 * gbs / row["vLLM routed_us"]
        quoted = paper.VLLM_H200_US.get(model, {}).get(int(batch))
        row["vLLM quoted_us"] = quoted
        row["vLLM here / quoted"] = row["vLLM routed_us"] / quoted if quoted else None
        if (model, batch) in peer.index:  # optional columns
            row["vLLM config"] = peer.loc[(model, batch)].get("tile")
            row["peer rel err"] = peer.loc[(model, batch)].get("peer_rel_err")
        rows.append(row)
    kernel = df["vllm_kernel"].iloc[0] if "vllm_kernel" in df else "vLLM"
    notes = ([src.reason] if src.reason else []) + [
        f"vLLM's fused_moe_kernel and get_default_config, copied verbatim from {kernel}, run on "
        "the same GPU, layer copies and rotating routings as our baseline; "
        "default config (no tuned file exists for these shapes), vLLM's naive one-pair-per-block "
        "path where it takes it (tokens x k x 4 <= experts)",
        "'vLLM routed': w13 GEMM, SiLU*up, w2 GEMM, sum over k, with the ids given and vLLM's "
        "block alignment computed before the capture -- its routing and align launches are left "
        "out, so it is a lower bound on vLLM's time; 'ours routed' keeps our align launch, "
        "'ours from logits' our routing too. Speed vs vLLM > 1: ours is faster",
        "'vLLM quoted_us': the reference times of vLLM on an H200 that the kernels set out to "
        "match (deamoe.paper.VLLM_H200_US); 'vLLM here / quoted' puts this chip's run of the same "
        "kernel beside them",
        _roofline_note(df.drop_duplicates(["model", "batch"])),
    ] + shared_peer_note(df["model"])
    order = {m: i for i, m in enumerate(dict.fromkeys(df["model"]))}  # each model's rows by batch
    table = pd.DataFrame(rows).sort_values(["model", "batch"], ignore_index=True,
                                           key=lambda c: c.map(order) if c.name == "model" else c)
    return Artifact("vllm_peer", "vLLM's fused MoE beside our baseline on the same GPU", table, [src], notes, data=df)


def decode_tpot(results: Path, measured: Path, profile: str | None) -> Artifact:
    src = microbench_source(results, measured, "decode_tpot.csv", (), profile)
    table = src.frame if src.ok else pd.DataFrame({"model-level decode TPOT": [NOT_RUN]})
    if src.ok:  # from the times, as figure45's (the headline's speedup is theirs too)
        table = table.assign(speedup=table["baseline_tpot_ms"] / table["deamoe_tpot_ms"])
    notes = [src.reason] if src.ok and src.reason else []
    return Artifact("decode_tpot", "Model-level decode step (GPU counterpart of Figure 3)",
                    table, [src], notes + ["random weights, static KV cache, CUDA graphs"])


def build_all(results: Path, measured: Path, profile: str | None) -> list[Artifact]:
    from deamoe.report.decode_slo import decode_slo
    from deamoe.report.fp8_panel import figure45_fp8

    results, measured = Path(results), Path(measured)
    # the scale of five artifacts: the pre-training runs' summary.json, read once per build
    pretrained = pretrain_summaries(results)
    return [table1(results, profile), figure2(results, profile),
            figure3(results, profile, pretrained), figure3_slo(results, profile, pretrained),
            decode_slo(results, measured, profile),
            figure45(results, measured, profile),
            figure45_fp8(results, measured, profile),
            decode_tpot(results, measured, profile), vllm_peer(results, measured, profile),
            table2(results, profile, pretrained), table3(results, profile, pretrained),
            table4(results, profile), pretrain(results, profile, pretrained)]
