"""Reading the stages' result files, with where each number came from.

The report reads only `results/` and `reports/measured/`. Every loaded table carries a
`Provenance` (scale: profile, model size, tokens; hardware: device, library versions, git sha,
date) gathered from the columns or JSON fields the stages write through
`deamoe.provenance.provenance()`. A file that is absent is a stage that did not run: the report
shows "not run" with the reason instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from deamoe.errors import DataError, absent

# Columns / JSON keys that describe where a number came from rather than the number itself.
HARDWARE_KEYS = ("device", "gpu", "backend", "python", "torch", "triton", "transformers",
                 "vllm", "lm_eval", "git_sha", "date")
SCALE_KEYS = ("profile", "params", "n_params", "total_params", "active_params", "tokens", "steps")
VERSION_KEYS = ("python", "torch", "triton", "transformers", "vllm", "lm_eval")


@dataclass
class Provenance:
    """Scale and hardware of a set of numbers; each field joins the distinct values seen."""

    profile: str = "not recorded"
    model_size: str = "not recorded"
    tokens: str = "not recorded"
    device: str = "not recorded"
    versions: str = "not recorded"
    git_sha: str = "not recorded"
    date: str = "not recorded"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _join(values) -> str:
    seen = []
    for v in values:
        if v is None or (isinstance(v, float) and pd.isna(v)) or str(v) in ("", "nan"):
            continue
        s = _fmt_scalar(v)
        if s not in seen:
            seen.append(s)
    return "; ".join(seen)


def _fmt_scalar(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and abs(v) >= 10_000:
        return human(v)
    return str(v)


def human(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def provenance_of(records: list[dict], profile: str | None = None,
                  scale_records: list[dict] | None = None) -> Provenance:
    """Provenance from flat records (CSV rows or flattened JSON); absent fields stay 'not recorded'.

    `scale_records` (e.g. the training runs' summary.json behind an evaluation) supply model size
    and tokens when the rows themselves are not training runs.
    """
    scale_rows = records if scale_records is None else scale_records

    def pick(*keys, rows=None):
        # hardware from the rows themselves, else from the runs behind them
        for group in ([rows] if rows is not None else [records, scale_rows]):
            found = _join(r.get(k) for r in group for k in keys)
            if found:
                return found
        return ""

    p = Provenance()
    p.profile = pick("profile") or profile or p.profile
    size = pick("params", "n_params", "total_params", "model_params", rows=scale_rows)
    active = pick("active_params", rows=scale_rows)
    if size:
        p.model_size = f"{size} params" + (f" ({active} active)" if active else "")
    p.tokens = pick("tokens", "train_tokens", rows=scale_rows) or p.tokens
    p.device = pick("device", "gpu") or p.device
    versions = [f"{k} {v}" for k in VERSION_KEYS
                if (v := pick(k)) and v != "not installed"]
    p.versions = ", ".join(versions) or p.versions
    p.git_sha = pick("git_sha") or p.git_sha
    dates = sorted(d for d in pick("date").split("; ") if d)
    if dates:
        p.date = dates[0] if len(dates) == 1 else f"{dates[0]} .. {dates[-1]}"
    return p


def flatten_json(obj: dict) -> dict:
    """Top-level scalars plus the contents of a nested `provenance` / `scale` block."""
    flat = {k: v for k, v in obj.items() if not isinstance(v, (dict, list))}
    for key in ("provenance", "scale", "config_summary"):
        if isinstance(obj.get(key), dict):
            flat.update({k: v for k, v in obj[key].items() if not isinstance(v, (dict, list))})
    return flat


@dataclass
class Loaded:
    """One result file: its table (None when the stage did not run) and where it came from."""

    path: Path
    frame: pd.DataFrame | None
    status: str = "ok"  # "ok" or "not run"
    reason: str = ""
    prov: Provenance = field(default_factory=Provenance)

    @property
    def ok(self) -> bool:
        return self.frame is not None and self.status == "ok"


def not_run(path: Path, reason: str) -> Loaded:
    return Loaded(path=path, frame=None, status="not run", reason=reason)


def read_csv(path: Path, required: tuple[str, ...] = (), profile: str | None = None,
             scale_records: list[dict] | None = None, scale: dict | None = None) -> Loaded:
    """A stage's CSV, or "not run" if it is absent or has no rows (a header alone measured
    nothing, and is not shown as reproduced); missing required columns are a DataError.

    Model size and tokens come from `scale_records` when given (the training runs behind the
    numbers), else from the rows; `scale` states them outright (e.g. analytic results).
    """
    from dataclasses import replace

    from deamoe.readers import read_table
    from deamoe.table_specs import table_spec

    path = Path(path)
    if absent(path):  # (a link to nothing is a table meant to be there: read_table names it)
        return not_run(path, f"{path} does not exist (its stage did not run)")
    # the columns and numbers of a table of that name (a time of 0 too: the panels divide by
    # it); a row without provenance is shown as "not recorded" (only the commands that replace
    # a committed table require it)
    spec = table_spec(path)
    frame = read_table(path, replace(spec, required=tuple(dict.fromkeys(required + spec.required)),
                                     provenance=()), path.name)
    if frame.empty:
        return not_run(path, f"{path} has no rows (its stage measured nothing)")
    records = frame.to_dict("records")
    prov = provenance_of(records, profile, scale_records)
    for key, value in (scale or {}).items():
        setattr(prov, key, value)
    return Loaded(path=path, frame=frame, prov=prov)


def read_json(path: Path) -> dict | None:
    """A stage's JSON object (None: the file is absent), validated by deamoe.readers."""
    from deamoe.readers import read_json as read_object

    path = Path(path)
    return None if absent(path) else read_object(path, "result file")


def run_summaries(results: Path, runs: list[str]) -> list[dict]:
    """Flattened summary.json of each training run that exists (model size, tokens, hardware)."""
    from deamoe.readers import read_run_summary

    out = []
    for run in runs:
        path = Path(results) / "train" / run / "summary.json"
        if not absent(path):
            out.append({"run": run, **flatten_json(read_run_summary(path, whole=False))})
    return out


def curves_beside(sources: list[Loaded]) -> pd.DataFrame | None:
    """The loss curves (curves.csv) beside the loaded tables, stacked; None where there are none.
    A stage that summarises training runs writes them with its table, so a figure drawn from them
    shows the runs of the table and no others."""
    from deamoe.readers import read_table
    from deamoe.table_specs import table_spec

    files = [s.path.with_name("curves.csv") for s in sources if s.ok]
    frames = [read_table(p, table_spec(p), "loss curves") for p in files if not absent(p)]
    return pd.concat(frames, ignore_index=True) if frames else None


def resolved_profile(results: Path) -> str | None:
    """The profile named in the newest resolved config the pipeline wrote
    (results/config/resolved-<content hash>.yaml), if any."""
    from deamoe.errors import ConfigError
    from deamoe.readers import read_text
    from deamoe.readers import load_yaml

    paths = sorted(Path(results).glob("config/resolved-*.yaml"), key=lambda p: p.stat().st_mtime)
    if not paths:
        return None
    try:
        cfg = load_yaml(read_text(paths[-1]), str(paths[-1]))
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    return cfg.get("profile") if isinstance(cfg, dict) else None


# the scale of numbers that come from no trained model (the `scale` of read_csv)
ANALYTIC = {"model_size": "Table 1 shapes (analytic, no trained model)", "tokens": "n/a"}
KERNEL = {"model_size": "Table 1 layer shapes, random bf16 weights", "tokens": "n/a"}
KERNEL_FP8 = {"model_size": "Table 1 layer shapes, random bf16 weights quantised to block-scaled FP8",
              "tokens": "n/a"}


def microbench_source(results: Path, measured: Path, name: str, required, profile,
                      scale: dict = KERNEL) -> Loaded:
    """This run's GPU numbers if it had a GPU, else the committed ones, else not run."""
    status = read_json(results / "microbench" / "status.json") or {}
    here = results / "microbench" / name
    if not absent(here):
        return read_csv(here, required=required, profile=profile, scale=scale)
    committed = read_csv(measured / name, required=required, scale=scale)
    if committed.ok:
        why = status.get("reason", "no microbenchmark result in this run")
        committed.reason = f"this run: not run ({why}); showing committed {measured / name}"
        return committed
    why = status.get("reason") or f"{here} does not exist"
    return not_run(here, f"{why}; no committed {measured / name} either")
