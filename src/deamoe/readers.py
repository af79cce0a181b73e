"""One reader per kind of file (or folder) the stages read, each validating what it returns.

Text files (UTF-8, gunzipped by name), config YAML, token shards with their meta.json, a run's
summary.json and log.csv, lm_eval.json, a serving level's c<N>.json, CSV tables (the stages'
own and the committed ones under reports/measured/).  Each checks encoding, shape, types and
ranges and raises a DataError (ConfigError for config files) naming the file and, where it
helps, the line, key or byte offset: a truncated, foreign or hand-edited file is one line, never
a JSONDecodeError, KeyError or IndexError from deep inside a stage, nor a NaN carried on.
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from deamoe.errors import ConfigError, DataError, absent, not_a_file

# --- text files -----------------------------------------------------------------------------


def gunzip(raw: bytes, path: str | os.PathLike) -> bytes:
    """The content of gzip file `path` (bytes `raw`, one or more members); DataError naming the
    file and the byte where it goes wrong: not gzip, corrupt, or truncated."""
    import zlib

    if raw[:2] != b"\x1f\x8b":
        raise DataError(f"{path}: not a gzip file (named .gz, but byte 0 starts no gzip stream)")
    out, pos, chunk = [], 0, 1 << 16
    while True:
        member = zlib.decompressobj(wbits=31)
        while not member.eof:
            if pos >= len(raw):
                raise DataError(f"{path}: truncated gzip file (the stream ends early, at byte {len(raw)})")
            piece = raw[pos:pos + chunk]
            try:
                out.append(member.decompress(piece))
            except zlib.error as exc:
                raise DataError(f"{path}: corrupt gzip data in bytes {pos}-{pos + len(piece)} ({exc})") from None
            pos += len(piece) - len(member.unused_data)
        rest = raw[pos:]
        if not rest.strip(b"\x00"):
            return b"".join(out)
        if rest[:2] != b"\x1f\x8b":
            raise DataError(f"{path}: corrupt gzip data (not gzip after the stream's end, at byte {pos})")


def read_text(path: str | os.PathLike, what: str = "") -> str:
    """A UTF-8 text file (a `what`), gunzipped when its name ends in `.gz`; a DataError naming it
    and where: no regular file, not gzip, a truncated or corrupt gzip stream, or a byte that is not
    UTF-8 (with its line and byte offset)."""
    path = Path(path)
    if not path.is_file():  # (a pipe would be waited on for ever)
        raise DataError(f"{path}: {not_a_file(path)}" + (f" ({what})" if what else ""))
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror})") from None
    if gz := path.suffix == ".gz":
        raw = gunzip(raw, path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        where = "of the uncompressed text" if gz else "of the file"
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {raw[exc.start:exc.start + 1]!r} at "
                        f"offset {exc.start} {where})") from None


def no_nul(text: str, path, what: str) -> str:
    """`text` (of file `path`, a `what`), or a DataError naming the line of its first NUL byte:
    no text file holds one (a damaged or binary file)."""
    if (nul := text.find("\x00")) >= 0:
        raise DataError(f"{path}:{text.count(chr(10), 0, nul) + 1}: a NUL byte (character {nul}); not a "
                        f"{what} (a damaged copy?)")
    return text


# --- YAML -----------------------------------------------------------------------------------


def load_yaml(text: str, where: str):
    """YAML `text` (from `where`), a key given twice in one mapping being an error naming it:
    plain YAML keeps the last value silently, so a setting written twice would be half-applied."""
    import yaml

    Loader = type("Loader", (yaml.SafeLoader,), {})

    def mapping(loader, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: keys it brings may be set here
                continue  # (YAML's merge; construct_mapping below applies it)
            key, line = loader.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{where}:{line}: key {key!r} is given twice (also on line {seen[key]}); "
                                  "keep one")
            seen[key] = line
        return loader.construct_mapping(node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{where} cannot be parsed: {first}{at}") from None


# --- JSON -----------------------------------------------------------------------------------


def load_json(text: str, where: str):
    """JSON `text` (from `where`), a key given twice in one object being an error naming it."""
    def pairs(items):
        keys = [k for k, _ in items]
        twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if twice is not None:
            raise ConfigError(f"{where}: key {twice!r} is given twice in one object; keep one")
        return dict(items)

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} cannot be parsed: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None


def _text(path: Path, what: str) -> str:
    """The UTF-8 text of a file that exists and holds something (read_text names a bad byte)."""
    text = read_text(path, what)
    if not text.strip():
        raise DataError(f"{path}: empty file, not a {what}")
    return text


def input_folder(path: str | os.PathLike, what: str) -> Path:
    """`path` as a folder to read (a `what`); a DataError where it is missing or a file."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: {'a file, not a folder' if path.exists() else 'no such folder'} ({what})")
    return path


def read_json(path: str | Path, what: str) -> dict:
    """The JSON object in `path` (a `what`, e.g. "run summary"); DataError naming the file and
    the line and column where it stops being JSON, or saying it holds no object."""
    path = Path(path)
    try:
        doc = json.loads(_text(path, what))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}); not a {what}") from None
    except (RecursionError, ValueError) as exc:  # ValueError: an integer of over 4300 digits
        how = "JSON nested too deeply" if isinstance(exc, RecursionError) else "a JSON integer of 4300+ digits"
        raise DataError(f"{path}: {how}; not a {what}") from None
    if not isinstance(doc, dict):
        raise DataError(f"{path}: holds a JSON {type(doc).__name__}, not the object of a {what}")
    return doc


KINDS = {"str": (str,), "int": (int,), "number": (int, float), "object": (dict,), "list": (list,)}
KIND_NAMES = {"str": "a string", "int": "an integer", "number": "a number", "object": "an object", "list": "a list"}


def need(doc: dict, path, key: str, kind: str, optional: bool = False, low: float | None = None,
         high: float | None = None, above: float | None = None):
    """doc[key], checked to be of `kind` (a KINDS name; numbers finite, >= `low`, > `above`, <= `high`);
    a missing key is an error unless `optional` (then None).  Errors name the file and the key."""
    if key not in doc or (optional and doc[key] is None):
        if optional:
            return None
        raise DataError(f"{path}: missing key {key!r}")
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, KINDS[kind]):
        raise DataError(f"{path}: key {key!r} must be {KIND_NAMES[kind]}, got {value!r:.60}")
    if kind in ("int", "number"):
        if isinstance(value, int) and abs(value) >= 2**63:  # no float, no int64 holds it
            raise DataError(f"{path}: key {key!r} is a {len(str(abs(value)))}-digit integer, too large")
        if not math.isfinite(value):
            raise DataError(f"{path}: key {key!r} is {value}, not a finite number")
        if low is not None and value < low:
            raise DataError(f"{path}: key {key!r} is {value}, must be >= {low}")
        if above is not None and value <= above:
            raise DataError(f"{path}: key {key!r} is {value}, must be > {above}")
        if high is not None and value > high:
            raise DataError(f"{path}: key {key!r} is {value}, must be <= {high}")
    return value


# --- CSV tables -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """What a CSV table must hold: its columns, the numeric ones among them (non-numeric text is
    an error), the ones every row must give as a finite number (of those, `positive`: > 0, a
    time or a count of tokens), its provenance columns (each
    row must name the commit and date its numbers came from), the columns naming a row's point
    (`key`, those present: no two rows alike), whether it must hold a row (`rows`) and the
    numeric columns that count something (`whole`: a batch, a seed; 3.5 was shown as 3), and the
    values a column may hold (`allowed`, (column, values) pairs: a model or variant that no stage
    writes, a row added by hand, was shown as a reproduced one), and the columns read once a
    column is there (`together`, groups: that column first; a column of them cut from a
    hand-edited table failed in the report as a fault of the program)."""

    required: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()
    finite: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    rows: bool = False
    whole: tuple[str, ...] = ()
    allowed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    together: tuple[tuple[str, ...], ...] = ()


# a commit's short sha may be all digits: read as text, never as a number
TEXT_COLUMNS = {"git_sha": str}


def _check_fields(text: str, path: Path, what: str) -> None:
    """A DataError naming a header's column given twice, or the first line whose count of fields
    is not the header's (short: read as empty cells; long: pandas would shift every column)."""
    import csv

    rows = csv.reader(io.StringIO(text))
    try:
        header = next(rows, [])
        twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
        if twice is not None:  # pandas would rename the second (`x.1`) and read the first
            raise DataError(f"{path}:1: column {twice!r} is given twice in the header; not a CSV {what}")
        for row in rows:
            if row and len(row) != len(header):
                how = "truncated or cut short" if len(row) < len(header) else "more than its columns"
                raise DataError(f"{path}:{rows.line_num}: {len(row)} fields where the header has "
                                f"{len(header)} ({how}); not a CSV {what}")
    except csv.Error as exc:
        raise DataError(f"{path}:{rows.line_num}: not a readable CSV {what} ({exc})") from None


def read_table(path: str | Path, spec: TableSpec = TableSpec(), what: str = "table"):
    """A CSV table as a DataFrame, checked against `spec`: DataError naming the file and, for a
    bad value, its line and column."""
    import numpy as np
    import pandas as pd

    path = Path(path)
    text = no_nul(_text(path, what), path, f"CSV {what}")  # pandas ends a cell there: a column lost unsaid
    _check_fields(text, path, what)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=TEXT_COLUMNS, index_col=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise DataError(f"{path}: not a readable CSV {what} ({str(exc).splitlines()[0]})") from None
    missing = [c for c in spec.required + spec.provenance if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)} of a {what}")
    for first, *rest in spec.together:
        cut = [c for c in rest if c not in frame.columns] if first in frame.columns else []
        if cut:
            raise DataError(f"{path}: missing column(s) {', '.join(cut)} of a {what} (read with its "
                            f"column {first})")
    for col in dict.fromkeys(spec.numbers + spec.finite + spec.whole):
        if col not in frame.columns:
            continue
        raw = frame[col]
        values = pd.to_numeric(raw.where(raw.map(type) != bool), errors="coerce")  # True is not 1
        text = values.isna() & raw.notna() & ~raw.astype(str).str.strip().str.lower().isin(["nan", ""])
        if text.any():
            i = int(text.to_numpy().argmax())
            raise DataError(f"{path}:{i + 2}: column {col} is {str(raw.iloc[i])!r:.40}, not a number")
        if col in spec.finite:
            bad = ~np.isfinite(values.to_numpy(dtype=float))
            if bad.any():
                i = int(bad.argmax())
                shown = "empty or NaN" if pd.isna(raw.iloc[i]) else str(raw.iloc[i])
                raise DataError(f"{path}:{i + 2}: column {col} is {shown}, not a finite number")
        if col in spec.positive and (values <= 0).any():
            i = int((values <= 0).to_numpy().argmax())
            raise DataError(f"{path}:{i + 2}: column {col} is {raw.iloc[i]}, not a number > 0")
        frac = values.notna() & (values % 1 != 0)
        if col in spec.whole and frac.any():
            i = int(frac.to_numpy().argmax())
            raise DataError(f"{path}:{i + 2}: column {col} is {raw.iloc[i]}, not a whole number")
        frame[col] = values
    for col in spec.provenance:
        blank = frame[col].isna() | (frame[col].astype(str).str.strip() == "")
        if blank.any():
            raise DataError(f"{path}:{int(blank.to_numpy().argmax()) + 2}: column {col} is empty "
                            "(every row must say where its numbers came from)")
    if "date" in spec.provenance:  # the report sorts and prints it: a date, not any text
        when = pd.to_datetime(frame["date"].astype(str), format="ISO8601", errors="coerce", utc=True)
        if when.isna().any():
            i = int(when.isna().to_numpy().argmax())
            raise DataError(f"{path}:{i + 2}: column date is {frame['date'].iloc[i]!r}, not an ISO "
                            "8601 date (e.g. 2026-12-05T09:30:00Z)")
    for col, values in spec.allowed:
        other = ~frame[col].astype(str).isin(values) if col in frame.columns else None
        if other is not None and other.any():
            i = int(other.to_numpy().argmax())
            shown = "empty" if pd.isna(frame[col].iloc[i]) else repr(str(frame[col].iloc[i]))[:40]
            raise DataError(f"{path}:{i + 2}: column {col} is {shown}, not one this pipeline writes "
                            f"({', '.join(values)})")
    if spec.rows and frame.empty:
        raise DataError(f"{path}: a {what} with no rows (only a header)")
    check_unique(frame, spec, path)
    return frame


def check_unique(frame, spec: TableSpec, path=None, lines=None) -> None:
    """A DataError naming the line of a row whose point (spec.key's columns) an earlier row has:
    FILE:LINE of `frame` read from `path`, or lines[i] for row i (tables stacked)."""
    key = [c for c in spec.key if c in frame.columns]
    twice = frame.duplicated(key) if key else None
    if twice is not None and twice.any():
        i = int(twice.to_numpy().argmax())
        first = int(frame[key].astype(str).eq(frame[key].iloc[i].astype(str)).all(axis=1).to_numpy().argmax())
        at = lines or [f"{path}:{n + 2}" for n in range(len(frame))]
        point = ", ".join(f"{c}={frame[c].iloc[i]}" for c in key)
        raise DataError(f"{at[i]}: the row of {point} is given twice (also at {at[first]}); keep one")


# --- what the stages write and read back ----------------------------------------------------


LOG_SPEC = TableSpec(("step", "tokens", "loss"), numbers=("lr", "grad_norm", "mean_distinct_departments"),
                     finite=("step", "tokens", "loss"),
                     positive=("step", "tokens", "loss", "mean_distinct_departments"))  # (loss: a cross-entropy)


def read_training_log(path: str | Path):
    """A training run's log.csv: at least one row, finite step/tokens/loss, steps increasing."""
    frame = read_table(path, LOG_SPEC, "training log")
    if frame.empty:
        raise DataError(f"{path}: no rows (the run logged no step)")
    steps = frame["step"].to_numpy()
    bad = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), None)
    if bad is not None:
        raise DataError(f"{path}:{bad + 2}: step {steps[bad]:g} does not follow step {steps[bad - 1]:g}")
    return frame


def read_run_summary(path: str | Path, whole: bool = True) -> dict:
    """A training run's summary.json, with the keys the summary tables use (`whole`; else those
    present must have their types: the report reads only a run's scale and provenance)."""
    doc = read_json(path, "run summary")
    for key in ("run", "ffn_type"):
        need(doc, path, key, "str", not whole)
    for key in ("params", "hidden_size", "num_hidden_layers"):
        need(doc, path, key, "int", not whole, low=1)
    need(doc, path, "val_loss", "number", not whole, above=0)  # a cross-entropy: > 0, as log.csv's loss
    need(doc, path, "tokens_per_s", "number", not whole, low=0)
    for key in ("steps", "tokens", "planned_steps"):
        need(doc, path, key, "int", optional=True, low=0)
    return doc


# the metrics of a task's result that the tables read (the harness's "<metric>,none" keys), and
# their range: an accuracy is a fraction (5 stood in Table 2 as 500%), a perplexity >= 1
LM_EVAL_METRICS = {"acc": (0, 1), "acc_norm": (0, 1), "word_perplexity": (1, None), "byte_perplexity": (1, None),
                   "bits_per_byte": (0, None)}


def read_lm_eval(path: str | Path) -> dict:
    """lm_eval.json: `results` maps each task to its metrics (finite numbers), `n-samples` and
    the project's `deamoe` block, where present, are objects."""
    doc = read_json(path, "lm-eval result")
    results = need(doc, path, "results", "object")
    for task, res in results.items():
        if not isinstance(res, dict):
            raise DataError(f"{path}: results.{task} must be an object, got {res!r:.60}")
        for metric, (low, high) in LM_EVAL_METRICS.items():
            need(res, f"{path}: results.{task}", f"{metric},none", "number", optional=True, low=low, high=high)
    for key in ("n-samples", "deamoe"):
        block = need(doc, path, key, "object", optional=True)
        for name, value in (block or {}).items():
            if key == "n-samples" and not isinstance(value, dict):
                raise DataError(f"{path}: {key}.{name} must be an object, got {value!r:.60}")
            if key == "n-samples":  # the tables' column n
                need(value, f"{path}: {key}.{name}", "effective", "int", optional=True, low=0)
    meta = doc.get("deamoe") or {}
    need(meta, f"{path}: deamoe", "model", "str", optional=True)
    for task, counts in (need(meta, f"{path}: deamoe", "corpora", "object", optional=True) or {}).items():
        if not isinstance(counts, dict):
            raise DataError(f"{path}: deamoe.corpora.{task} must be an object")
        for key in ("words", "tokens"):
            need(counts, f"{path}: deamoe.corpora.{task}", key, "int", optional=True, low=0)
    return doc


SERVE_NUMBERS = ("tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms", "ttft_ms", "output_tok_s")


def read_serve_result(path: str | Path) -> dict:
    """One serving level's c<N>.json: its model, concurrency and finite, non-negative times."""
    doc = read_json(path, "serving result")
    need(doc, path, "model", "str")
    need(doc, path, "concurrency", "int", low=1)
    for key in SERVE_NUMBERS:
        need(doc, path, key, "number", low=0)
    need(doc, path, "tpot_server_mean_ms", "number", optional=True, low=0)
    for key in ("backend", "device"):
        need(doc, path, key, "str")
    need(doc, path, "provenance", "object", optional=True)
    return doc


SHARD_DTYPES = ("uint16", "uint32")


def read_token_shards(directory: str | Path):
    """(meta, train, val) of a data folder: meta.json's keys and types, and each shard memory-
    mapped, a whole number of tokens of meta's dtype, as many as meta says, every id < vocab."""
    import numpy as np

    directory = Path(directory)
    meta_path = directory / "meta.json"
    if directory.is_file() or absent(meta_path):  # (a folder or link there: read_json names it)
        why = ("a file; give the folder `python -m deamoe data` wrote" if directory.is_file()
               else "missing meta.json; run `python -m deamoe data`")
        raise DataError(f"no token shards in {directory} ({why})")
    meta = read_json(meta_path, "token shards' meta.json (rerun `python -m deamoe data`)")
    dtype = need(meta, meta_path, "dtype", "str")
    if dtype not in SHARD_DTYPES:
        raise DataError(f"{meta_path}: key 'dtype' is {dtype!r}, not one of {', '.join(SHARD_DTYPES)}")
    vocab = need(meta, meta_path, "vocab_size", "int", low=2)
    arrays = []
    for split in ("train", "val"):
        count = need(meta, meta_path, f"{split}_tokens", "int", low=1)
        path = directory / f"{split}.bin"
        if not path.is_file() or path.stat().st_size == 0:
            raise DataError(f"token shard {path} is missing or empty")
        size, item = path.stat().st_size, np.dtype(dtype).itemsize
        if size % item:
            raise DataError(f"token shard {path}: {size} bytes is not a whole number of {dtype} tokens "
                            f"(truncated or not a shard); rerun `python -m deamoe data`")
        tokens = np.memmap(path, dtype=dtype, mode="r")
        if len(tokens) != count:
            raise DataError(f"token shard {path} holds {len(tokens)} tokens, {meta_path.name} says {count}")
        top = int(tokens.max())
        if top >= vocab:
            raise DataError(f"token shard {path}: token id {top} at offset {int(tokens.argmax()) * item} "
                            f"is not below vocab_size {vocab} ({meta_path.name})")
        arrays.append(tokens)
    return meta, arrays[0], arrays[1]
