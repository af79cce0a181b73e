"""A config section (a mapping) as a typed dataclass: the one parser behind every section.

`from_dict(cls, data, where)` rejects unknown keys and values of the wrong type with a
ConfigError naming `section.key`; keys left out take the dataclass defaults.  It reads no file
and runs no cross-key check (deamoe.settings: the loader; deamoe.checks: the check).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

from deamoe.errors import ConfigError
from deamoe.schema import number_as_text

T = TypeVar("T")


def _check_type(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        for arg in args:
            try:
                return _check_type(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where} has the wrong type (expected {hint}), got {value!r}")
    if hint is type(None):
        if value is None:
            return None
        raise ConfigError(f"{where} must be null, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        item = args[0] if args else Any
        return type(value)(_check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)) if origin is list else tuple(
            _check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(number_as_text(where, value, "number") or f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(number_as_text(where, value, "integer") or f"{where} must be an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping")
        return from_dict(hint, value, where)
    return value


def from_dict(cls: type[T], data: dict | None, where: str) -> T:
    """Build dataclass `cls` from `data`, rejecting unknown keys and wrong types."""
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            raise ConfigError(f"unknown key {where}.{key} (known: {', '.join(sorted(fields))})")
    kwargs = {key: _check_type(value, hints[key], f"{where}.{key}") for key, value in data.items()}
    return cls(**kwargs)
