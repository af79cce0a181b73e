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
    return f"{path or '<top level>'}: {best.message}"


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
