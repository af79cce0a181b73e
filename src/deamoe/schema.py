"""The config's JSON schemas (workflow/schemas/*.schema.yaml): one definition of every key's type
and range, checked by the workflow (common.smk) and by every command (deamoe.checks).

`problems(doc)` returns one line per fault, each naming the key: the top level (known sections,
profile), then each section present against its own schema (its best-matching error), and every
number that is not finite (YAML's .nan / .inf pass a schema's bounds, since NaN compares false).
Light imports only: the Snakefile imports this module.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "workflow" / "schemas"


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict | None:
    """The schema of section `name` ("config": the top level); None outside a checkout."""
    import yaml

    path = SCHEMA_DIR / f"{name}.schema.yaml"
    if not path.is_file():
        return None
    schema = yaml.safe_load(path.read_text())
    schema.pop("$schema", None)
    return schema


def property_schema(schema: dict | None, key: str) -> dict:
    """The schema of property `key` of an object's schema (its `properties`, else a schema in
    `additionalProperties`: pretrain.sizes.<name>), {} where it names none."""
    if not isinstance(schema, dict):
        return {}
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else {}


def _text_only(schema: dict) -> bool:
    """Whether the schema takes text and no number or boolean for a scalar (type string, or string
    beside array / null)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    kinds = {kind} if isinstance(kind, str) else set(kind or ())
    return "string" in kinds and not kinds & {"integer", "number", "boolean"}


def typed_leaves(value, schema: dict):
    """`value` with every leaf a string (as Snakemake hands nested --config values over: YAML's
    BaseLoader) read as a config file's would be: YAML for each leaf -- but where `schema` takes
    text only (a tokenizer, a path, a run name) the string stays, since BaseLoader keeps no
    quotes and YAML would turn a quoted "0123" into 83.  Mappings and lists inside
    (pretrain.sizes.<name>.extra_seeds) alike.  An empty leaf stays the empty string: it was
    written `''` (`ablation.size: ''`), which YAML reads as null."""
    import yaml

    if isinstance(value, dict):
        return {k: typed_leaves(v, property_schema(schema, k)) for k, v in value.items()}
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [typed_leaves(v, items if isinstance(items, dict) else {}) for v in value]
    if isinstance(value, str) and value and not _text_only(schema):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value  # left a string; the schema check names the key if that is wrong
    return value


def first_problem(schema: dict, instance, prefix: str = "") -> str | None:
    """The best-matching error of `instance` against `schema`, as one line naming its key (an
    unknown key named itself, with the allowed ones); None when it validates."""
    import jsonschema

    best = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    if best is None:
        return None
    path = ".".join(([prefix] if prefix else []) + [str(p) for p in best.absolute_path])
    if best.validator == "additionalProperties" and isinstance(best.instance, dict):
        allowed = set(best.schema.get("properties", {}))
        extra = sorted(set(best.instance) - allowed)
        keys = ", ".join(f"{path}.{k}" if path else str(k) for k in extra)
        return f"unknown key {keys} (allowed: {', '.join(sorted(allowed))})"
    if best.validator == "uniqueItems":
        return f"{path} must be distinct values, got {best.instance}"
    if best.validator == "type" and (problem := number_as_text(path, best.instance, best.validator_value)):
        return problem
    return f"{path or '<top level>'}: {best.message}"


def number_as_text(where: str, value, kind) -> str | None:
    """The line for key `where` holding `value`, text that Python reads as a number of the JSON
    schema type(s) `kind` but YAML does not (`1e-3`), with the number to write; None otherwise."""
    written = _yaml_number(value, kind)
    return None if written is None else (
        f"{where}: {value!r} is text to the YAML that config files are read with, not a number "
        f"(an exponent needs a dot before it and a sign); write {written}")


def _yaml_number(value, kind) -> str | None:
    """`value` as YAML 1.1 (PyYAML, the reader of config files and of --config) reads a number,
    where it is text that Python reads as one the key takes: `1e-3` and `1.0e3` are strings to it
    (a float needs a dot and a signed exponent), so `lr: 1e-3` was refused as "not of type
    'number'"; None otherwise."""
    kinds = {kind} if isinstance(kind, str) else set(kind or ())
    if not isinstance(value, str) or "string" in kinds or not kinds & {"number", "integer"}:
        return None
    import yaml

    # only the exponent form YAML keeps as text: a quoted '8' or '0.5' was made text on purpose
    # (YAML reads it unquoted as a number), so the schema's own line stands for it
    if "e" not in value.lower() or not isinstance(yaml.safe_load(value), str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    if "number" not in kinds:  # an integer key: its digits, where it is whole
        return str(int(number)) if number.is_integer() else None
    mantissa, _, exponent = repr(number).partition("e")
    if not exponent:
        return mantissa
    mantissa += "" if "." in mantissa else ".0"
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


def non_finite(value, where: str) -> list[str]:
    """Every NaN or infinite number in `value` (nested mappings and lists), naming its key."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where}: {value} is not a finite number"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{where}.{i}")]
    return []


def section_problems(name: str, value, where: str = "") -> list[str]:
    """Section `name` of the config against its schema: at most one line (its first problem),
    naming keys under `where` (default: the section's name)."""
    where = where or name
    found = non_finite(value, where)
    schema = load(name)
    if found or schema is None:
        return found[:1]
    problem = first_problem(schema, value, prefix=where)
    return [problem] if problem else []


def top_level_problems(doc: dict) -> list[str]:
    """The top level of the config: known sections, a known profile."""
    schema = load("config")
    if schema is None:
        return []
    problem = first_problem(schema, doc)
    return [problem] if problem else []
