"""Summaries of finished runs with the paper's values beside them (Table 4; pre-training).

Each writes a summary CSV (one row per run, with its provenance) and, next to it, `curves.csv`
(tidy: run, step, tokens, loss, ...) for the report's loss-curve figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from deamoe.errors import ConfigError, DataError, absent
from deamoe.io import write_csv
from deamoe.provenance import recorded, row_sha
from deamoe.shapes import table1_row
from deamoe.train.runs import TABLE4
from deamoe.train.settings import Settings


def _load_run(runs_dir: Path, spec, config: str,
              columns: tuple[str, ...] = ()) -> tuple[dict, "object"]:
    """summary.json and log.csv of run `spec.name`, validated (deamoe.readers), the log holding
    `columns` too, the run planned for the steps that `config` gives it (_check_planned) and of
    its recipe (_check_recipe), the summary naming the run (not a folder copied from another
    run's), the log ending at the step the summary says the run took (a log cut short would be
    averaged as the run's)."""
    from deamoe.readers import read_run_summary, read_training_log

    name, steps = spec.name, spec.steps
    run = runs_dir / name
    summary, log = run / "summary.json", run / "log.csv"
    for path in (summary, log):
        if absent(path):  # (a folder or a link to nothing there: its reader names it)
            raise DataError(f"run {name}: {path} is missing (train it first: python -m deamoe train --run {name})")
    curve = read_training_log(log)
    missing = [c for c in columns if c not in curve.columns]
    if missing:
        raise DataError(f"{log}: missing column(s) {', '.join(missing)} of a training log")
    doc = read_run_summary(summary)
    _check_planned(doc, steps, run, config)
    if doc["run"] != name:
        raise DataError(f"{summary}: key 'run' is {doc['run']!r}, not {name!r}: the summary of another "
                        f"run; train {name} again into {run}")
    last = int(curve["step"].iloc[-1])  # (a row a step)
    if doc.get("steps") is not None and last != doc["steps"]:
        raise DataError(f"{log}: the log ends at step {last}, but {summary} says the run took "
                        f"{doc['steps']} steps (cut short, or not this run's log); train {name} again")
    _check_recipe(doc, spec, summary, config)
    return doc, curve


def _check_distinct(curve, summ: dict, log: Path) -> None:
    """A DataError naming the first row of the log whose mean_distinct_departments is more than
    the departments a token's experts can span (min of n_dept and k_expert of its summary.json):
    no count of this run's routing, and Table 4 would show it."""
    sizes = [summ.get(key) for key in ("n_dept", "k_expert")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
        return
    values = curve["mean_distinct_departments"]
    over = values > min(sizes)
    if over.any():
        i = int(over.to_numpy().argmax())
        raise DataError(f"{log}:{i + 2}: column mean_distinct_departments is {values.iloc[i]:g}, more than the "
                        f"{min(sizes)} departments a token's experts can span (n_dept, k_expert of its summary.json)")


def summary_outputs(out_csv: str | Path, evals: bool = False) -> list[Path]:
    """The files a summary command writes: its table, curves.csv beside it (and evals.csv)."""
    out_csv = Path(out_csv)
    names = ["curves.csv"] + (["evals.csv"] if evals else [])
    return [out_csv, *(out_csv.with_name(n) for n in names)]


def _curves(frames: list, out_csv: Path) -> None:
    import pandas as pd

    curves = (pd.concat(frames, ignore_index=True) if frames else
              pd.DataFrame(columns=["step", "tokens", "loss", "run", "size", "model", "seed"]))
    write_csv(out_csv.with_name("curves.csv"), curves)


def _last_mean(curve, column: str, n: int) -> float | None:
    """The mean of `column` over the last `n` steps of a training log (the summary tables' one
    last-n mean: Table 4's and the pre-training loss and departments), None where the log has no
    value there (a baseline has no departments)."""
    values = curve[column].tail(n).dropna() if column in curve.columns else ()
    return float(values.mean()) if len(values) else None


def _check_planned(summ: dict, steps: int, run: Path, config: str) -> None:
    """A DataError when the run was planned for other than the `steps` that `config` gives it:
    it was trained with another config, and its last_n rows and step count would be read as
    this one's.  A time-boxed run (train --max-seconds: its planned steps, fewer done) passes;
    so does a summary without planned_steps (written before runs recorded it)."""
    planned = summ.get("planned_steps")
    if planned is not None and planned != steps:
        raise DataError(f"run {run.name} was trained for {planned} steps ({run / 'summary.json'}: "
                        f"planned_steps), but {config} gives it {steps}: it was trained with "
                        "another config; train it again with this one, or summarise it with the "
                        "config it was trained with")


def _recipe(spec) -> dict:
    """What a run's summary.json (or a summary table's row) records of its RunSpec."""
    return {"kind": spec.kind, "size": spec.size, "seed": spec.seed, "ffn_type": spec.ffn_type,
            **spec.decoder, **spec.ffn}


def _check_recipe(got: dict, spec, where, config: str, want: dict | None = None) -> None:
    """A DataError naming the first value of `got` (a summary.json, or a kept row) that is not
    the run's in `config`: a run folder or row of another size, decoder or FFN shape would be
    joined as this run's, its loss beside the wrong pair.  Keys `got` lacks (a summary written
    before it recorded them, an empty cell) are not checked."""
    import math

    for key, value in (want or _recipe(spec)).items():
        have = got.get(key)
        if value is None or have is None or (isinstance(have, float) and math.isnan(have)):
            continue
        if have != value:
            raise DataError(f"{where}: {key} is {have!r}, but {config} gives run {spec.name} "
                            f"{value!r}: a run of another config; train it with this one, or "
                            "summarise it with the config it was trained with")


def _check_kept(row: dict, spec, name: str, at: str, config: str) -> None:
    """A kept row (pretrain --keep) must be run `name` of this config: its size, model and seed
    those of its name, its planned steps the plan's and its shape the recipe's (a table of
    another size, length or config would otherwise stand for the run unchecked)."""
    from deamoe.train.runs import parse_run

    r = parse_run(name)
    recipe = {("h" if k == "hidden_size" else k): v for k, v in _recipe(spec).items()
              if k not in ("kind", "size", "seed")}
    want = {"size": r["size"], "model": r["model"], "seed": r["seed"],
            "planned_steps": spec.steps, **recipe}
    _check_recipe(row, spec, f"{at}: the row of run {name}", config, want)


def ablation_summary(s: Settings, config: str, runs_dir: str, out_csv: str):
    """One row per run (variant x seed); ranks order the variants within each seed.  s: the
    checked settings of the config file `config` (named in messages)."""
    import pandas as pd

    from deamoe.train.runs import ablation_run_names, ablation_size, parse_run, run_spec, trained_as

    runs_dir, out_csv = Path(runs_dir), Path(out_csv)
    rows, frames = [], []
    n = s.ablation.last_n
    for name in ablation_run_names(s):
        twin = trained_as(s, name)  # the pre-training run it is, when it is one
        summ, curve = _load_run(runs_dir, run_spec(s, twin), config, ("mean_distinct_departments",))
        _check_distinct(curve, summ, runs_dir / twin / "log.csv")
        r = parse_run(name)
        variant = r["variant"]
        op, init, topk, paper = TABLE4[variant]
        rows.append({
            "run": name, "variant": f"No.{variant[2:]}", "seed": r["seed"], "size": ablation_size(s),
            "operator": op, "init": init, "dept_topk": topk,
            "loss_last_n": _last_mean(curve, "loss", n), "last_n": min(n, len(curve)),
            "steps": int(curve["step"].iloc[-1]), "tokens": int(curve["tokens"].iloc[-1]),
            "val_loss": summ.get("val_loss"),
            "mean_distinct_departments": _last_mean(curve, "mean_distinct_departments", n),
            "k_dept": summ.get("k_dept"), "h": summ.get("hidden_size"),
            "num_hidden_layers": summ.get("num_hidden_layers"), "params": summ.get("params"),
            "paper_loss": paper,
            "paper_mean_distinct_departments": 3.95 if variant == "no1" else None,
            "paper_last_n": 200, "paper_tokens_last_n": 210_000_000,
            "trained_as": twin,
            "profile": s.profile, **_provenance(summ),
        })
        frames.append(curve[["step", "tokens", "loss"]].assign(run=name, variant=f"No.{variant[2:]}",
                                                               seed=r["seed"]))
    table = pd.DataFrame(rows)
    # Ranks make the comparison with the paper scale-free: the paper's ordering is the claim.
    table["rank"] = table.groupby("seed")["loss_last_n"].rank(method="min").astype(int)
    table["paper_rank"] = table.groupby("seed")["paper_loss"].rank(method="min").astype(int)
    write_csv(out_csv, table)
    _curves(frames, out_csv)
    print(table[["variant", "seed", "operator", "init", "dept_topk", "loss_last_n", "paper_loss"]].to_string(index=False))
    return table


PROVENANCE = ("device", "torch", "python", "git_sha", "date")
# the run's text (deamoe.train.data.corpus_fields; empty for runs that predate them)
CORPUS = ("corpus_tokens", "epochs", "val_tokens", "val_split", "data_sha256")


def _provenance(summ: dict) -> dict:
    return recorded(summ, CORPUS + PROVENANCE)


def _kept_rows(keeps: tuple[str, ...]) -> dict:
    """{run: (row, its table, the curves.csv beside that table or None, "FILE:LINE")} of earlier summary
    tables; a run in two of them is refused (which row would stand for it?)."""
    from deamoe.readers import TableSpec, read_table
    from deamoe.table_specs import table_spec

    kept: dict = {}
    for keep in keeps:
        table = read_table(keep, TableSpec(required=("run", "size", "model", "seed"),
                                           finite=("seed", "val_loss"), positive=("val_loss",),
                                           provenance=("git_sha", "date"), key=("run",)), "pre-training summary")
        beside = Path(keep).with_name("curves.csv")
        curves = None if absent(beside) else read_table(beside, table_spec(beside), "loss curves")
        for i, row in enumerate(table.to_dict("records")):
            if row["run"] in kept:
                raise DataError(f"--keep: run {row['run']} is in {kept[row['run']][1]} and in {keep}; "
                                "give each run's table once")
            kept[row["run"]] = (row, keep, curves, f"{keep}:{i + 2}")
    return kept


def _kept_curve(curves, row: dict, keep: str):
    """The rows of `curves` (the curves.csv beside `keep`) of kept run row["run"], which must end
    at the row's last step: a truncated or foreign curves.csv would draw a curve short of it."""
    curve = curves[curves["run"] == row["run"]]
    last = curve["step"].max() if len(curve) else None
    if "steps" in row and last != row["steps"]:
        raise DataError(f"{Path(keep).with_name('curves.csv')}: the curve of run {row['run']} ends at step "
                        f"{last}, but {keep} says it ran {row['steps']} steps (truncated, or not the "
                        "curves of that table)")
    return curve


def pretrain_summary(s: Settings, config: str, runs_dir: str, out_csv: str, size: str = "",
                     steps: int = 0, keep: tuple[str, ...] = (), evals: Callable | None = None,
                     seeds: tuple[int, ...] = ()):
    """One row per pre-training run (size x model x seed) at each size's own length, or at
    `steps` of its tokens axis: shapes, budget, tokens, passes over the corpus, losses, and with
    `evals` (name, model -> the run's columns and long rows: eval.tables.run_eval_columns) its
    perplexities and task accuracies; curves.csv beside it, and with `evals` also evals.csv
    (one row per run, task and metric).  A run trained as another
    (runs.trained_as) is read from that one and names it in `trained_as`.  keep: earlier summary
    tables whose row stands for a run of the plan not in `runs_dir` (seeds trained in another
    call, e.g. pretrain.sizes.<size>.extra_seeds added later), with its curve where a curves.csv
    stands beside its table; a run trained as another is found under either name (smallrms'
    baselines in small's table).  seeds: only these seeds of the plan (default: all), each one
    the plan has.  s: the checked settings of the config file `config`."""
    import pandas as pd

    from deamoe.train import runs as runlib

    runs_dir, out_csv = Path(runs_dir), Path(out_csv)
    kept = _kept_rows(keep)
    sizes = [size] if size else list(s.pretrain.sizes)
    paper_7b = table1_row("Baseline-7B")  # the ladder's expert shape ratio is Baseline-7B's
    rows, frames, eval_rows = [], [], []
    n = s.ablation.last_n
    for name in _planned(s, sizes, steps, seeds):
        r = runlib.parse_run(name)
        z = runlib.size(s, r["size"])
        which = r["model"]
        twin = runlib.trained_as(s, name)
        source = name if name in kept else twin if twin in kept else None
        if source and absent(runs_dir / twin / "summary.json"):
            row, table, curves, at = kept[source]
            _check_kept(row, runlib.run_spec(s, twin), source, at, config)
            # the twin's own row (another size's table) is this run's but for its name and size
            rows.append({**row, "run": name, "size": r["size"], "git_sha": row_sha(row.get("git_sha"))})
            if curves is not None:
                frames.append(_kept_curve(curves, row, table).assign(run=name, size=r["size"]))
            continue
        summ, curve = _load_run(runs_dir, runlib.run_spec(s, twin), config)
        tokens = int(curve["tokens"].iloc[-1])
        row = {
            "run": name, "size": r["size"], "model": which, "seed": r["seed"], "ffn_type": summ["ffn_type"],
            "h": summ["hidden_size"], "num_hidden_layers": summ["num_hidden_layers"],
            "num_attention_heads": summ.get("num_attention_heads"),
            "num_key_value_heads": summ.get("num_key_value_heads"),
            "h_ffn": summ.get("h_ffn"), "n_expert": summ.get("n_expert"), "k_expert": summ.get("k_expert"),
            "n_dept": summ.get("n_dept"), "k_dept": summ.get("k_dept"),
            # DeaMoE's inter-stage operator (the baseline has none)
            "operator": summ.get("operator") if summ["ffn_type"] == "deamoe" else None,
            "params": summ["params"], "ffn_params_per_layer": z.budget[f"{which}_params"],
            "ffn_flops_per_token_layer": z.budget[f"{which}_flops"],
            "params_ratio": z.budget["params_ratio"], "flops_ratio": z.budget["flops_ratio"],
            "steps": int(curve["step"].iloc[-1]), "planned_steps": summ.get("planned_steps"),
            "tokens": tokens, "tokens_per_param": tokens / summ["params"], "lr": summ.get("lr"),
            "aux_loss_coef": summ.get("aux_loss_coef"), "init_std": summ.get("init_std"),
            "expert_init_scale": summ.get("expert_init_scale"),
            "final_loss": float(curve["loss"].iloc[-1]), "loss_last_n": _last_mean(curve, "loss", n),
            "last_n": min(n, len(curve)), "val_loss": summ["val_loss"],
            # over the same last n steps as loss_last_n (the run's summary.json holds the mean
            # over the last_n it was trained with, which a later ablation.last_n does not retrain)
            "mean_distinct_departments": _last_mean(curve, "mean_distinct_departments", n),
            "tokens_per_s": summ["tokens_per_s"], "wall_s": summ.get("wall_s"),
            "ffn_impl": summ.get("ffn_impl"), "compile": summ.get("compile"),
            "paper_params_ratio": paper_7b.paper_params_ratio, "paper_flops_ratio": paper_7b.paper_flops_ratio,
            "trained_as": twin, "profile": s.profile, **_provenance(summ),
        }
        if evals:
            cols, long = evals(twin, which)
            row.update(cols)
            eval_rows += [{"size": r["size"], "model": which, "seed": r["seed"], **e} for e in long]
        rows.append(row)
        frames.append(curve[["step", "tokens", "loss"]].assign(run=name, size=r["size"], model=which,
                                                               seed=r["seed"]))
    table = pd.DataFrame(rows)
    write_csv(out_csv, table)
    _curves(frames, out_csv)
    if evals:
        write_csv(out_csv.with_name("evals.csv"), pd.DataFrame(eval_rows))
    print(table[["run", "params", "tokens", "final_loss", "val_loss", "params_ratio", "flops_ratio"]].to_string(index=False))
    return table


def _planned(s: Settings, sizes: list[str], steps: int, seeds: tuple[int, ...]) -> list[str]:
    """The plan's runs of `sizes` at `steps`, of `seeds` only where given (each one the plan has)."""
    from deamoe.train import runs as runlib

    names = runlib.pretrain_run_names(s, sizes, steps)
    planned = {runlib.parse_run(n)["seed"] for n in names}
    if missing := [x for x in seeds if x not in planned]:
        at = f" at {steps} steps" if steps else ""
        raise ConfigError(f"--seeds {','.join(map(str, missing))}: not seeds of {', '.join(sizes)}{at} "
                          f"(its seeds there: {', '.join(map(str, sorted(planned)))})")
    return [n for n in names if not seeds or runlib.parse_run(n)["seed"] in seeds]
