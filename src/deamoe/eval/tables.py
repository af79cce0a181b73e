"""downstream.csv and perplexity.csv from the lm_eval.json of each evaluated model.

downstream.csv: model, task, metric, value, stderr, n, paper_value, table_metric, + provenance.
  One row per (model, task, metric) with metric acc and, where the harness gives it, acc_norm;
  value and stderr in percent like Table 2.  paper_value sits on the row of the metric the
  paper's table is read as (table_metric = true; see deamoe.paper), empty on the other row.
perplexity.csv: model, dataset, word_perplexity, byte_perplexity, bits_per_byte, n, paper_value,
  tokens_per_word, token_perplexity, + provenance.  paper_value is Table 3's number, compared with
  word_perplexity.  token_perplexity = exp(NLL / scored tokens) = word_perplexity ** (words /
  tokens), from the counts the runner records (empty for an output without them).
n is the number of documents the harness evaluated (after eval.limit).
"""

from __future__ import annotations

import math
from pathlib import Path

from deamoe.errors import DataError, absent
from deamoe.paper import TABLE2_HARNESS, TABLE3_HARNESS, table2_value, table3_value
from deamoe.provenance import recorded

PROVENANCE = ("git_sha", "date", "device", "profile", "lm_eval", "torch", "limit_per_task", "ppl_max_chars")
DOWNSTREAM_COLUMNS = ["model", "task", "metric", "value", "stderr", "n", "paper_value", "table_metric"]
PERPLEXITY_COLUMNS = ["model", "dataset", "word_perplexity", "byte_perplexity", "bits_per_byte", "n",
                      "paper_value", "tokens_per_word", "token_perplexity"]
RUN_COLUMNS = ["run", "size", "seed"]  # which training run of the ladder (from the folder name)


def _number(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan  # the harness writes "N/A" where it has no stderr
    return x


def _outside(settings, run: str) -> bool:
    """Whether folder `run` is named after a ladder run that `settings` does not train (a size,
    seed or length of an earlier config); a folder of another name is a model evaluated by hand."""
    from deamoe.errors import ConfigError
    from deamoe.train.runs import parse_run, run_spec

    try:
        parse_run(run)
    except ConfigError:
        return False
    try:
        run_spec(settings, run)
    except ConfigError:
        return True
    return False


def load_results(in_dir: str | Path, settings=None) -> dict[str, dict]:
    """run (folder name) -> lm_eval.json contents, for every <in_dir>/<run>/lm_eval.json; with the
    training `settings` of the config, not the runs it does not train (left from an earlier
    config: a removed seed or size would stand in Tables 2 and 3 beside this config's runs)."""
    from deamoe.readers import input_folder, read_lm_eval

    input_folder(in_dir, "the evaluations' folder, e.g. results/eval")
    found = {}
    # (not glob("*/lm_eval.json"): it drops a link to nothing, which read_lm_eval names)
    runs = [d for d in sorted(Path(in_dir).iterdir()) if d.is_dir()]
    for path in (d / "lm_eval.json" for d in runs if not absent(d / "lm_eval.json")):
        if settings is None or not _outside(settings, path.parent.name):
            found[path.parent.name] = read_lm_eval(path)  # a malformed one named, with its key
    if not found:
        raise DataError(f"{in_dir}: no */lm_eval.json found of this config's runs "
                        "(run `python -m deamoe eval` first)")
    return found


def _block(doc: dict, *keys: str) -> dict:
    """doc[k1][k2]..., each an object, or {}: read_lm_eval lets an optional block be null (as
    absent), which .get(key, {}) would hand on as None."""
    for key in keys:
        doc = doc.get(key) or {}
    return doc


def _provenance(doc: dict) -> dict:
    return recorded(_block(doc, "deamoe"), PROVENANCE)


def _results(doc: dict, tasks) -> list[tuple[str, dict]]:
    """(task, the harness's result) for each of `tasks` that the run has."""
    return [(task, doc["results"][task]) for task in tasks if doc["results"].get(task) is not None]


def downstream_rows(model: str, doc: dict) -> list[dict]:
    rows = []
    for task, res in _results(doc, TABLE2_HARNESS):
        n = _block(doc, "n-samples", task).get("effective")
        for metric in ("acc", "acc_norm"):
            if f"{metric},none" not in res:
                continue
            paper = table2_value(task, model, metric)
            rows.append({
                "model": model, "task": task, "metric": metric,
                "value": 100 * _number(res[f"{metric},none"]),
                "stderr": 100 * _number(res.get(f"{metric}_stderr,none")),
                "n": n, "paper_value": paper, "table_metric": TABLE2_HARNESS[task][1] == metric,
                **_provenance(doc),
            })
    return rows


def perplexity_rows(model: str, doc: dict) -> list[dict]:
    rows = []
    for task, res in _results(doc, TABLE3_HARNESS):
        word_ppl = _number(res.get("word_perplexity,none"))
        counts = _block(doc, "deamoe", "corpora", task)
        words, tokens = counts.get("words"), counts.get("tokens")
        per_token = math.exp(math.log(word_ppl) * words / tokens) if words and tokens and word_ppl > 0 else math.nan
        rows.append({
            "model": model, "dataset": task,
            "word_perplexity": word_ppl,
            "byte_perplexity": _number(res.get("byte_perplexity,none")),
            "bits_per_byte": _number(res.get("bits_per_byte,none")),
            "n": _block(doc, "n-samples", task).get("effective"),
            "paper_value": table3_value(task, model),
            "tokens_per_word": tokens / words if words and tokens else math.nan,
            "token_perplexity": per_token,
            **_provenance(doc),
        })
    return rows


def run_eval_columns(eval_dir: Path, name: str, model: str) -> tuple[dict, list[dict]]:
    """Word perplexity per corpus and the table metric per task, as columns of the run's row;
    and the long downstream/perplexity rows (the pre-training summary's `evals`).  A run
    without lm_eval.json is a DataError naming it."""
    from deamoe.readers import read_lm_eval

    path = eval_dir / name / "lm_eval.json"
    if absent(path):  # (a link to nothing or a folder there: read_lm_eval names it)
        raise DataError(f"run {name}: {path} is missing (evaluate it first: python -m deamoe eval)")
    doc = read_lm_eval(path)
    cols, long = {}, []
    for r in perplexity_rows(model, doc):
        cols[f"ppl_{r['dataset']}"] = r["word_perplexity"]
        cols[f"token_ppl_{r['dataset']}"] = r["token_perplexity"]
        cols[f"tokens_per_word_{r['dataset']}"] = r["tokens_per_word"]
        long.append({"run": name, "kind": "perplexity", "task": r["dataset"], "metric": "word_perplexity",
                     "value": r["word_perplexity"], "stderr": None, "n": r["n"], "paper_value": r["paper_value"]})
    for r in downstream_rows(model, doc):
        if r["table_metric"]:
            cols[f"acc_{r['task']}"] = r["value"]
        long.append({"run": name, "kind": "downstream", "task": r["task"], "metric": r["metric"],
                     "value": r["value"], "stderr": r["stderr"], "n": r["n"], "paper_value": r["paper_value"]})
    meta = _block(doc, "deamoe")
    cols.update(eval_limit_per_task=meta.get("limit_per_task"), eval_ppl_max_chars=meta.get("ppl_max_chars"),
                lm_eval=meta.get("lm_eval"))
    return cols, long


def _run_fields(run: str) -> dict:
    from deamoe.errors import ConfigError
    from deamoe.train.runs import parse_run

    try:
        r = parse_run(run)
    except ConfigError:  # a folder named after the model alone (evaluated outside the ladder)
        return {"run": run, "size": None, "seed": None}
    return {"run": run, "size": r.get("size"), "seed": r["seed"]}


def build_tables(in_dir: str | Path, settings=None):
    import pandas as pd

    results = load_results(in_dir, settings)
    down, ppl = [], []
    for run, doc in results.items():
        model = _block(doc, "deamoe").get("model") or run
        where = _run_fields(run)
        down += [{**r, **where} for r in downstream_rows(model, doc)]
        ppl += [{**r, **where} for r in perplexity_rows(model, doc)]
    extra = list(PROVENANCE) + RUN_COLUMNS
    return (pd.DataFrame(down, columns=DOWNSTREAM_COLUMNS + extra),
            pd.DataFrame(ppl, columns=PERPLEXITY_COLUMNS + extra))


def write_tables(in_dir: str | Path, out_dir: str | Path, settings=None) -> tuple[Path, Path]:
    from deamoe.io import write_csvs

    down, ppl = build_tables(in_dir, settings)
    out_dir = Path(out_dir)
    write_csvs({out_dir / "downstream.csv": down, out_dir / "perplexity.csv": ppl})  # both or neither
    return out_dir / "downstream.csv", out_dir / "perplexity.csv"
