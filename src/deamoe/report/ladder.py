"""Quality at GPU scale: the pre-training ladder and Tables 2-4 with their seed spread.

Rows are the `quality_<size>` and `ablation` tables of a GPU run (results/quality/<size>/runs.csv,
results/ablation/summary.csv).  Per table, rows made on a GPU in this run are shown, otherwise the
committed ones under reports/measured/<gpu>/quality/ (<size>/runs.csv, ablation/summary.csv); a
size with neither is "not run".  Every figure in the text is computed from those rows.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from deamoe import paper
from deamoe.errors import DataError, absent
from deamoe.report.sources import Loaded, curves_beside, not_run, read_csv
from deamoe.report.artifact import NOT_RUN, Artifact
from deamoe.shapes import MODELS
from deamoe.train.runs import PRETRAIN_RUN

TABLE4_TITLE = "Table 4 at GPU scale: ablation, mean and spread over seeds"
HOW_TO_RUN = ("run the gpu profile's quality_<size> / ablation_seeds targets on a GPU "
              "(docs/quality-ladder.md), or commit their rows under reports/measured/{gpu}/quality/")


# --- statistics ----------------------------------------------------------------------------

def seed_spread(rows: pd.DataFrame, value: str, by=("size", "model")) -> pd.DataFrame:
    """n, mean, sample standard deviation (ddof 1; NaN for one seed) and standard error of the
    mean of `value` per group."""
    g = rows.dropna(subset=[value]).groupby(list(by), sort=False)[value]
    out = pd.DataFrame({"n": g.count(), "mean": g.mean(), "std": g.std(ddof=1)}).reset_index()
    out["se"] = out["std"] / out["n"].map(math.sqrt)
    return out


def per_seed_difference(rows: pd.DataFrame, value: str, by=("size",)) -> pd.DataFrame | None:
    """DeaMoE minus baseline of `value` for each (group, seed) where both ran: columns
    [*by, seed, diff]; None where one of the models has no rows."""
    wide = rows.pivot_table(index=[*by, "seed"], columns="model", values=value, aggfunc="first")
    if not set(MODELS) <= set(wide.columns):
        return None
    return (wide["deamoe"] - wide["baseline"]).dropna().rename("diff").reset_index()


def paired_difference(rows: pd.DataFrame, value: str, by=("size",)) -> pd.DataFrame:
    """per_seed_difference; then per group (`by`: the size, or size and length) the number of
    pairs, mean, sample std and standard error of the mean of that difference."""
    diff = per_seed_difference(rows, value, by)
    if diff is None:
        return pd.DataFrame(columns=[*by, "n", "mean", "std", "se"])
    return seed_spread(diff, "diff", by=tuple(by))


def verdict(mean: float, se: float, n: int) -> str:
    """Where the paired difference of held-out loss stands against its seed noise."""
    if not n:
        return NOT_RUN
    if n < 2 or not math.isfinite(se):
        return "one seed: no spread to judge against"
    if abs(mean) <= 2 * se:
        return "within seed noise (|mean| <= 2 standard errors)"
    return ("DeaMoE behind (higher loss) beyond seed noise" if mean > 0
            else "DeaMoE ahead (lower loss) beyond seed noise")


# DeaMoE's inter-stage operator, as the ladder's tables and figures name it
OPERATOR_LABELS = {"silu": "SiLU (the paper's choice)", "rmsnorm": "RMSNorm (Table 4's No.2)",
                   "gelu": "GeLU (Table 4's No.3)", "none": "no operator (Table 4's No.4)"}


def operator_of(rows: pd.DataFrame) -> str:
    """The DeaMoE operator of one size's rows ('not recorded' for rows without the column)."""
    ops = rows.loc[rows["model"] == "deamoe"].get("operator", pd.Series(dtype=object)).dropna().unique()
    return ", ".join(sorted(map(str, ops))) or "not recorded"


def training_path_of(rows: pd.DataFrame) -> str:
    """How one size's runs trained: torch (the layers' own FFN), fast, fast+compile; 'not
    recorded' for rows without the columns."""
    if "ffn_impl" not in rows:
        return "not recorded"
    compiled = rows.get("compile", pd.Series(False, index=rows.index)).fillna(False).astype(str)
    paths = {f"{impl}+compile" if c == "True" else str(impl)
             for impl, c in zip(rows["ffn_impl"], compiled) if pd.notna(impl)}
    return ", ".join(sorted(paths)) or "not recorded"


# --- loading -------------------------------------------------------------------------------

def _is_gpu(frame: pd.DataFrame) -> bool:
    dev = frame.get("device")
    return dev is not None and len(frame) > 0 and not dev.astype(str).str.startswith("CPU").any()


def _check_committed_gpu(frame: pd.DataFrame, path: Path) -> None:
    """A DataError naming the first row of a committed quality table that does not say it ran
    on a GPU: the whole table was skipped as a CPU run's, its size shown as "not run"."""
    dev = frame["device"].astype(str) if "device" in frame else None
    if dev is None:
        raise DataError(f"{path}: no device column: committed quality rows say the GPU they ran on")
    cpu = dev.str.startswith("CPU") | frame["device"].isna()
    if cpu.any():
        i = int(cpu.to_numpy().argmax())
        raise DataError(f"{path}:{i + 2}: column device is {frame['device'].iloc[i]!r}: a row not run on a "
                        "GPU in a committed GPU table; commit only the GPU runs' rows")


def load_gpu_rows(pairs: list[tuple[Path, Path]], required: tuple[str, ...],
                  profile: str | None) -> tuple[pd.DataFrame | None, list[Loaded]]:
    """Per table (this run's path, the committed path): the rows a GPU made in this run where
    there are any, else the committed ones -- so re-measuring one size or length keeps the
    committed rows of the others beside it, each with its own provenance."""
    frames, used = [], []
    for pair in pairs:
        for path in pair:
            s = read_csv(path, profile=profile)
            if s.ok and path == pair[-1]:  # committed GPU rows: one of a CPU run hid them all
                _check_committed_gpu(s.frame, path)
            if not (s.ok and _is_gpu(s.frame)):  # a CPU run's rows are not GPU scale
                continue
            missing = [c for c in required if c not in s.frame.columns]
            if missing:
                raise DataError(f"{s.path}: missing column(s) {', '.join(missing)}")
            _check_folder(s.frame, s.path)
            frames.append(s.frame)
            used.append(s)
            break
    if not frames:
        return None, []
    return pd.concat(frames, ignore_index=True), used


def _check_folder(frame: pd.DataFrame, path: Path) -> None:
    """A DataError naming the first row of quality/<size>/[<n>steps/]runs.csv that is not of that
    size (or, planned for another length, of that length), or whose run name says another size,
    model, seed or length: a row pasted in from another table joined the other size's mean over
    seeds or was shown at the wrong length, a model misspelt left its seed out unsaid, a copied
    row with its seed edited stood as a seed of its own."""
    folder, steps = Path(path).parent, None
    if path.name != "runs.csv" or "size" not in frame:  # (the ablation's table has no size)
        return
    if folder.name.endswith("steps") and folder.name[:-5].isdigit():
        folder, steps = folder.parent, int(folder.name[:-5])
    bad = frame["size"].astype(str) != folder.name
    what, want = "size", folder.name
    if not bad.any() and steps is not None and "planned_steps" in frame:
        planned = pd.to_numeric(frame["planned_steps"], errors="coerce")
        bad, what, want = planned.notna() & (planned != steps), "planned_steps", steps
    if bad.any():
        i = int(bad.to_numpy().argmax())
        shown = frame["size"].iloc[i] if what == "size" else f"{planned.iloc[i]:g}"
        raise DataError(f"{path}:{i + 2}: column {what} is {shown}, not {want} (the "
                        "table's folder): a row of another table")
    for i, (run, model, seed) in enumerate(zip(frame.get("run", []), frame["model"], frame["seed"])):
        m = PRETRAIN_RUN.fullmatch(str(run))  # the run's name says its size, model, seed and length
        said = (m["size"], m["model"], int(m["seed"]), int(m["steps"] or 0)) if m else None
        if said != (folder.name, str(model), int(seed), steps or 0):
            raise DataError(f"{path}:{i + 2}: run {run} is not this row's size {folder.name}, model {model}, "
                            f"seed {seed:g} and length: a row edited or pasted in")


def quality_pairs(results: Path, measured: Path, patterns: tuple[str, ...]) -> list[tuple[Path, Path]]:
    """(this run's, committed) paths of every quality table matching patterns under either root
    (quality/<size>/..., the ablation's folder left out)."""
    found = set()
    for root in (Path(results), Path(measured)):
        for pattern in patterns:
            found.update(p.relative_to(root) for p in root.glob(pattern) if p.parts[-2] != "ablation")
    return [(Path(results) / rel, Path(measured) / rel) for rel in sorted(found)]


def ladder_rows(results: Path, measured: Path, profile: str | None):
    """The pre-training rows of every size (runs.csv) and their loss curves, with sources."""
    pairs = quality_pairs(results, measured, ("quality/*/runs.csv",))
    rows, sources = load_gpu_rows(pairs, ("size", "model", "seed", "val_loss"), profile)
    return rows, curves_beside(sources), sources


def _missing(measured: Path) -> Loaded:
    gpu = Path(measured).name
    return not_run(Path(measured) / "quality", "no GPU-scale rows: " + HOW_TO_RUN.format(gpu=gpu))


def _sizes(rows: pd.DataFrame | None, wanted: tuple[str, ...]) -> list[str]:
    """The configured sizes first, then any other size in the rows, smallest model first."""
    found = [] if rows is None else list(rows.groupby("size")["params"].min().sort_values().index)
    return list(wanted) + [s for s in found if s not in wanted]


# --- artifacts -----------------------------------------------------------------------------

def pretrain_gpu(results: Path, measured: Path, profile: str | None,
                 sizes: tuple[str, ...]) -> Artifact:
    rows, curves, sources = ladder_rows(results, measured, profile)
    out = []
    for size in _sizes(rows, sizes):
        r = rows[rows["size"] == size] if rows is not None else pd.DataFrame()
        line = {"size": size}
        if r.empty:
            out.append({**line, "verdict": NOT_RUN})
            continue
        base, dea = (r[r["model"] == m] for m in MODELS)
        spread = seed_spread(r, "val_loss").set_index("model")
        diff = paired_difference(r, "val_loss")
        d = diff.iloc[0] if len(diff) else pd.Series({"n": 0, "mean": math.nan, "std": math.nan, "se": math.nan})
        b_mean = spread["mean"].get("baseline", math.nan)
        line.update({
            "DeaMoE operator": operator_of(r), "training path": training_path_of(r),
            "params baseline": base["params"].max(), "params DeaMoE": dea["params"].max(),
            "ffn params ratio": r["params_ratio"].iloc[0], "ffn flops ratio": r["flops_ratio"].iloc[0],
            "tokens per run": r["tokens"].max(), "tokens per param": r["tokens"].max() / r["params"].max(),
            **text_of(r),
            "seeds": int(d["n"]),
            "baseline held-out": b_mean, "baseline std": spread["std"].get("baseline", math.nan),
            "DeaMoE held-out": spread["mean"].get("deamoe", math.nan),
            "DeaMoE std": spread["std"].get("deamoe", math.nan),
            "diff DeaMoE - baseline": d["mean"], "diff std": d["std"],
            "diff %": 100 * d["mean"] / b_mean if b_mean else math.nan,
            "baseline final train": base["final_loss"].mean(), "DeaMoE final train": dea["final_loss"].mean(),
            "verdict": verdict(d["mean"], d["se"], int(d["n"])),
        })
        out.append(line)
    table = pd.DataFrame(out)
    notes = [claim_text(table), "std: sample standard deviation over seeds; diff: DeaMoE minus "
             "baseline on the same seed (same initialisation stream and batch order), its mean and "
             "std over seeds; within seed noise: |mean diff| <= 2 standard errors",
             "corpus tokens, held-out text: the text the size's runs trained on and how its held-out "
             "part was chosen, as the rows state it (not recorded: rows made before they did, on "
             "the first 60 MB of text with each book's tail held out)",
             "paper: FFN params ratio 1.017, FLOPs ratio 1.014 (Baseline-7B row); 7.3B models, "
             "110B tokens; the paper reports no seed spread",
             "training path: torch, the layers' own FFN; fast+compile, the fast FFN with compiled "
             "layers (the gpu profile's since 2026-12-01); rows of fast+compile dated before "
             "2026-12-02T06:40Z (commit aecc9e8) ran with DeaMoE's index math compiled by "
             "inductor, which at times inflated its x-gradients (docs/training-h200.md)"]
    return Artifact("pretrain_gpu", "Pre-training at GPU scale: held-out loss, mean and spread over "
                    "seeds", table, sources or [_missing(measured)], notes, data=curves, rows=rows)


def text_of(rows: pd.DataFrame) -> dict:
    """The text a size's runs trained on, as its rows state it: corpus tokens and how the
    held-out text was chosen; rows made before the rows recorded it say so."""
    tokens = rows["corpus_tokens"].dropna() if "corpus_tokens" in rows else pd.Series(dtype=float)
    split = rows["val_split"].dropna() if "val_split" in rows else pd.Series(dtype=object)
    return {"corpus tokens": tokens.max() if len(tokens) else math.nan,
            "held-out text": {"documents": "whole books", "tail": "each book's tail"}.get(
                split.iloc[0], split.iloc[0]) if len(split) else "not recorded"}


def claim_text(table: pd.DataFrame) -> str:
    """What the rows say about the paper's claim (comparable quality at equal parameters and
    FLOPs), in numbers; nothing here is fixed in advance."""
    done = table[table["verdict"] != NOT_RUN] if "verdict" in table else table.iloc[0:0]
    if done.empty:
        return "The paper's quality claim is not tested at GPU scale here: no rows (not run)."
    parts = []
    for _, t in done.iterrows():
        parts.append(f"{t['size']} ({t.get('DeaMoE operator', 'not recorded')}, {t['params baseline'] / 1e6:.1f}M params, {t['tokens per run'] / 1e6:.1f}M "
                     f"tokens, {int(t['seeds'])} seed{'s' if t['seeds'] != 1 else ''}): DeaMoE - baseline "
                     f"held-out loss {t['diff DeaMoE - baseline']:+.4f}"
                     + (f" +- {t['diff std']:.4f}" if math.isfinite(t["diff std"]) else "")
                     + f" ({t['diff %']:+.2f}%), {t['verdict']}")
    by_operator = {}
    for _, t in done.iterrows():
        op = t.get("DeaMoE operator", "not recorded")
        by_operator.setdefault(op, {}).setdefault(t["verdict"], []).append(t["size"])
    summary = "; ".join(f"with DeaMoE's operator {OPERATOR_LABELS.get(op, op)}, "
                        + ", ".join(f"{v}: {', '.join(s)}" for v, s in groups.items())
                        for op, groups in by_operator.items())
    missing = table.loc[table["verdict"] == NOT_RUN, "size"].tolist()
    tail = f" Not run: {', '.join(missing)}." if missing else ""
    return ("Evidence on the paper's claim of comparable quality at equal FFN parameters and "
            f"FLOPs, by size -- {'; '.join(parts)}. In short, {summary}.{tail}")


def _metric_table(rows: pd.DataFrame | None, sizes: list[str], prefix: str, paper_table: dict,
                  label: str) -> pd.DataFrame:
    out = []
    cols = [] if rows is None else [c for c in rows.columns if c.startswith(prefix)]
    for size in sizes:
        r = rows[rows["size"] == size] if rows is not None else pd.DataFrame()
        present = [c for c in cols if not r.empty and r[c].notna().any()]
        if not present:
            out.append({"size": size, label: NOT_RUN})
            continue
        for col in present:
            name = col.removeprefix(prefix)
            spread = seed_spread(r, col).set_index("model")
            diff = paired_difference(r, col)
            out.append({
                "size": size, label: name,
                "DeaMoE": spread["mean"].get("deamoe"), "DeaMoE std": spread["std"].get("deamoe"),
                "baseline": spread["mean"].get("baseline"), "baseline std": spread["std"].get("baseline"),
                "seeds": int(spread["n"].min()),
                "diff DeaMoE - baseline": diff["mean"].iloc[0] if len(diff) else None,
                "diff std": diff["std"].iloc[0] if len(diff) else None,
                "DeaMoE paper": paper_table["deamoe"].get(paper.paper_key(name)),
                "baseline paper": paper_table["baseline"].get(paper.paper_key(name)),
            })
    return pd.DataFrame(out)


# key -> (column prefix in runs.csv, the paper's table, label, title, notes)
_METRIC_TABLES = {
    "table2_gpu": ("acc_", paper.TABLE2, "task", "Table 2 at GPU scale: downstream accuracy (%), mean and "
                   "spread over the evaluated seeds", [paper.PAPER_SCALE["table2"], "lm-evaluation-harness, "
                   "zero-shot, the seeds in eval.seeds; the metric the paper's column is read as (acc or acc_norm)"]),
    "table3_gpu": ("ppl_", paper.TABLE3, "dataset", "Table 3 at GPU scale: word perplexity, mean and spread "
                   "over seeds", [paper.PAPER_SCALE["table3"], "every pre-training run, through the "
                   "pipeline's perplexity tasks (lm-evaluation-harness)"]),
}


def per_token_note(rows: pd.DataFrame | None) -> str:
    """Word perplexity against the per-token loss it comes from and the in-domain held-out loss."""
    head = ("Word perplexity is exp(NLL / words) with the harness's word counts (PTB: words + one end "
            "of sentence per line). These models learned only Gutenberg books, so PTB (lower-cased news "
            "with <unk> and N) and WikiText are out of their domain; the paper's models learned "
            "RedPajama, which includes Wikipedia. ")
    cols = [] if rows is None else [c for c in rows.columns if c.startswith("token_ppl_")]
    parts = []
    for col in cols:
        ds = col.removeprefix("token_ppl_")
        r = rows.dropna(subset=[col])
        for size, g in r.groupby("size", sort=False):
            nll = g[col].map(math.log)
            parts.append(f"{size} {ds}: {g[f'tokens_per_word_{ds}'].mean():.2f} tokens per word, "
                         f"{nll.min():.2f}-{nll.max():.2f} nats per token over {len(g)} runs against "
                         f"held-out Gutenberg {g['val_loss'].min():.2f}-{g['val_loss'].max():.2f}")
    if not parts:
        return head + "Per-token loss: not in these rows (runs.csv without token_ppl_* columns)."
    return head + "Per-token loss (ln of token perplexity) -- " + "; ".join(parts) + "."


def metric_table(key: str, results: Path, measured: Path, profile: str | None,
                 sizes: tuple[str, ...]) -> Artifact:
    """Table 2 or 3 at GPU scale (`key` in _METRIC_TABLES)."""
    prefix, paper_table, label, title, notes = _METRIC_TABLES[key]
    rows, _, sources = ladder_rows(results, measured, profile)
    table = _metric_table(rows, _sizes(rows, sizes), prefix, paper_table, label)
    if key == "table3_gpu":
        notes = [*notes, per_token_note(rows)]
    return Artifact(key, title, table, sources or [_missing(measured)], notes)


def variant_differences(rows: pd.DataFrame, value: str, reference: str = "No.1") -> pd.DataFrame:
    """Each variant minus `reference` (the paper's choices) of `value`, paired by seed (the same
    seed: the same batches, a function of seed and step), then per variant n, mean, sample std
    and standard error."""
    wide = rows.pivot_table(index="seed", columns="variant", values=value, aggfunc="first")
    if reference not in wide.columns:
        return pd.DataFrame(columns=["variant", "n", "mean", "std", "se"])
    diff = wide.sub(wide[reference], axis=0).drop(columns=reference)
    long = diff.reset_index().melt(id_vars="seed", var_name="variant", value_name="diff")
    return seed_spread(long, "diff", by=("variant",))


def noise_note(versus: pd.DataFrame) -> str:
    """Which variants differ from No.1 beyond two standard errors of their paired difference."""
    v = versus.dropna(subset=["se"])
    if v.empty:
        return "seed noise: fewer than two seeds per variant, so no variant can be told from No.1"
    beyond = [f"{name} {'lower' if r['mean'] < 0 else 'higher'} by {abs(r['mean']):.3f} +- {2 * r['se']:.3f}"
              for name, r in v.iterrows() if abs(r["mean"]) > 2 * r["se"]]
    within = [name for name, r in v.iterrows() if abs(r["mean"]) <= 2 * r["se"]]
    n = int(v["n"].min())
    text = (f"seed noise (vs No.1: the variant's loss minus No.1's at the same seed, mean +- 2 standard "
            f"errors over {n}+ seeds): beyond it {'; '.join(beyond) or 'none'}; within it "
            f"{', '.join(within) or 'none'}")
    if n == 2:
        text += ("; with two seeds the standard error has one degree of freedom, so a difference "
                 "beyond it is a lead to test with more seeds, not a settled ranking")
    return text


def table4_gpu(results: Path, measured: Path, profile: str | None) -> Artifact:
    req = ("variant", "seed", "loss_last_n")
    rows, sources = load_gpu_rows([(Path(results) / "ablation" / "summary.csv",
                                    Path(measured) / "quality" / "ablation" / "summary.csv")], req, profile)
    paper_rows = pd.DataFrame(paper.TABLE4, columns=["variant", "operator", "init", "dept_topk", "paper_loss"])
    if rows is None:
        table = paper_rows.assign(loss_last_n=NOT_RUN)
        return Artifact("table4_gpu", TABLE4_TITLE, table, [_missing(measured)], [paper.TABLE4_SCALE])
    rows = rows.assign(model=rows["variant"])
    last = seed_spread(rows, "loss_last_n", by=("variant",)).set_index("variant")
    held = seed_spread(rows, "val_loss", by=("variant",)).set_index("variant")
    dd = rows.groupby("variant")["mean_distinct_departments"].mean()
    table = paper_rows.set_index("variant").assign(
        **{"loss last N": last["mean"], "loss std": last["std"], "seeds": last["n"],
           "held-out": held["mean"], "held-out std": held["std"], "mean distinct departments": dd})
    versus = variant_differences(rows, "loss_last_n").set_index("variant")
    table = table.assign(**{"vs No.1": versus["mean"], "vs No.1 2se": 2 * versus["se"]})
    table = table[table["seeds"].notna()].reset_index()
    table["rank"] = table["loss last N"].rank(method="min").astype(int)
    table["paper rank"] = table["paper_loss"].rank(method="min").astype(int)
    size, n = rows.get("size", pd.Series(["?"])).iloc[0], int(rows["last_n"].iloc[0]) if "last_n" in rows else None
    notes = [paper.TABLE4_SCALE, f"reproduced at size {size}: mean training loss over the last {n} "
             "steps, held-out loss and distinct departments per token, mean and std over seeds; ranks "
             "order the variants by mean loss (the paper's ordering is its claim)",
             f"paper: No.1 uses {paper.DISTINCT_DEPARTMENTS_NO1} distinct departments per token",
             noise_note(versus)]
    return Artifact("table4_gpu", TABLE4_TITLE, table, sources, notes, data=curves_beside(sources),
                    rows=rows)


def build(results: Path, measured: Path, profile: str | None, sizes: tuple[str, ...]) -> list[Artifact]:
    return [pretrain_gpu(results, measured, profile, sizes),
            *(metric_table(key, results, measured, profile, sizes) for key in _METRIC_TABLES),
            table4_gpu(results, measured, profile)]
