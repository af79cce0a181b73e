"""Summaries of finished runs with the paper's values beside them (Table 4; pre-training).

Each writes a summary CSV and, next to it, `curves.csv` (tidy: run, step, tokens, loss) for the
report's loss-curve figures.
"""

from __future__ import annotations

import json
from pathlib import Path

from deamoe.errors import DataError
from deamoe.io import write_csv
from deamoe.train.runs import TABLE4
from deamoe.train.settings import load_settings


def _load_run(runs_dir: Path, name: str) -> tuple[dict, "object"]:
    import pandas as pd

    run = runs_dir / name
    summary, log = run / "summary.json", run / "log.csv"
    for path in (summary, log):
        if not path.is_file():
            raise DataError(f"run {name}: {path} is missing (train it first: python -m deamoe train --run {name})")
    curve = pd.read_csv(log)
    if curve.empty:
        raise DataError(f"run {name}: {log} has no rows")
    return json.loads(summary.read_text()), curve


def _curves(frames: list, out_csv: Path) -> None:
    import pandas as pd

    curves = pd.concat(frames, ignore_index=True)
    write_csv(out_csv.with_name("curves.csv"), curves)


def ablation_summary(config: str, runs_dir: str, out_csv: str):
    import pandas as pd

    s = load_settings(config)
    runs_dir, out_csv = Path(runs_dir), Path(out_csv)
    rows, frames = [], []
    for variant in s.ablation.variants:
        name = f"ablation-{variant}"
        summ, curve = _load_run(runs_dir, name)
        op, init, topk, paper = TABLE4[variant]
        n = s.ablation.last_n
        rows.append({
            "variant": f"No.{variant[2:]}", "operator": op, "init": init, "dept_topk": topk,
            "loss_last_n": float(curve["loss"].tail(n).mean()), "last_n": n,
            "steps": int(curve["step"].iloc[-1]), "tokens": int(curve["tokens"].iloc[-1]),
            "val_loss": summ.get("val_loss"),
            "mean_distinct_departments": float(curve["mean_distinct_departments"].tail(n).mean()),
            "k_dept": summ.get("k_dept"), "paper_loss": paper,
            "paper_mean_distinct_departments": 3.95 if variant == "no1" else None,
            "paper_last_n": 200, "paper_tokens_last_n": 210_000_000,
            "profile": s.profile, "device": summ.get("device"), "git_sha": summ.get("git_sha"),
            "date": summ.get("date"),
        })
        frames.append(curve[["step", "tokens", "loss"]].assign(run=name, variant=f"No.{variant[2:]}"))
    table = pd.DataFrame(rows)
    # Ranks make the comparison with the paper scale-free: the paper's ordering is the claim.
    table["rank"] = table["loss_last_n"].rank(method="min").astype(int)
    table["paper_rank"] = table["paper_loss"].rank(method="min").astype(int)
    write_csv(out_csv, table)
    _curves(frames, out_csv)
    print(table[["variant", "operator", "init", "dept_topk", "loss_last_n", "paper_loss"]].to_string(index=False))
    return table


def pretrain_summary(config: str, runs_dir: str, out_csv: str):
    import pandas as pd

    from deamoe.train.runs import pretrain_budget

    s = load_settings(config)
    runs_dir, out_csv = Path(runs_dir), Path(out_csv)
    b = pretrain_budget(s)
    rows, frames = [], []
    for which in ("baseline", "deamoe"):
        name = f"pretrain-{which}"
        summ, curve = _load_run(runs_dir, name)
        n = s.ablation.last_n
        rows.append({
            "model": which, "ffn_type": summ["ffn_type"], "h": summ["hidden_size"],
            "h_ffn": summ.get("h_ffn"), "n_expert": summ.get("n_expert"), "k_expert": summ.get("k_expert"),
            "n_dept": summ.get("n_dept"), "k_dept": summ.get("k_dept"),
            "params": summ["params"], "ffn_params_per_layer": b[f"{which}_params"],
            "ffn_flops_per_token_layer": b[f"{which}_flops"],
            "params_ratio": b["params_ratio"], "flops_ratio": b["flops_ratio"],
            "steps": int(curve["step"].iloc[-1]), "tokens": int(curve["tokens"].iloc[-1]),
            "final_loss": float(curve["loss"].iloc[-1]), "loss_last_n": float(curve["loss"].tail(n).mean()),
            "val_loss": summ["val_loss"], "tokens_per_s": summ["tokens_per_s"],
            "paper_params_ratio": 1.017, "paper_flops_ratio": 1.014,
            "profile": s.profile, "device": summ.get("device"), "git_sha": summ.get("git_sha"),
            "date": summ.get("date"),
        })
        frames.append(curve[["step", "tokens", "loss"]].assign(run=name, model=which))
    table = pd.DataFrame(rows)
    write_csv(out_csv, table)
    _curves(frames, out_csv)
    print(table[["model", "params", "final_loss", "val_loss", "params_ratio", "flops_ratio"]].to_string(index=False))
    return table
