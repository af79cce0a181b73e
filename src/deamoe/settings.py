"""The one loader for the pipeline configuration (config.yaml and the profiles).

A stage command gets `--config PATH` (the whole pipeline config, YAML or JSON) and calls
`load_section(path, "train", TrainSettings)`: the section becomes a dataclass, unknown keys and
wrong types raise ConfigError naming `section.key`, missing keys take the dataclass defaults.
Reading the file runs the whole config's check (deamoe.checks), the one the workflow runs too, so
values that conflict across keys or sections stop every command before it does any work.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, TypeVar

from deamoe.errors import ConfigError

T = TypeVar("T")

# Every section of the pipeline config -> the dataclass that holds it, in its stage's settings
# module.  Each class's defaults are the ones in workflow/schemas/<section>.schema.yaml (a test
# walks every section, nested mappings included).  Named, not imported: a stage's settings
# import this module's loader.
SECTIONS = {
    "analysis": "deamoe.analysis.settings:AnalysisSettings",
    "data": "deamoe.train.settings:DataSettings",
    "model": "deamoe.train.settings:ModelSettings",
    "train": "deamoe.train.settings:TrainSettings",
    "ablation": "deamoe.train.settings:AblationSettings",
    "pretrain": "deamoe.train.settings:PretrainSettings",
    "eval": "deamoe.eval.settings:EvalSettings",
    "serve": "deamoe.serve.settings:ServeSettings",
    "microbench": "deamoe.bench.settings:MicrobenchSettings",
    "report": "deamoe.report.build:ReportSettings",
}


def section_class(section: str) -> type:
    """The settings dataclass of pipeline config section `section`."""
    import importlib

    module, name = SECTIONS[section].split(":")
    return getattr(importlib.import_module(module), name)


def read_config(path: str | Path) -> dict:
    """The whole pipeline config as a dict; a missing or unparsable file is a ConfigError."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; give the config YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read ({exc.strerror})") from None
    from deamoe.readers import load_json, load_yaml

    try:  # both refuse a key given twice
        data = (load_json if path.suffix == ".json" else load_yaml)(text, f"config file {path}")
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"config file {path} cannot be parsed: {first}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at top level (section: settings), "
                          f"not {type(data).__name__ if data is not None else 'nothing'}")
    from deamoe.checks import check_config

    try:
        check_config(data)
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return data


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
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
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


def load_section(path: str | Path, section: str, cls: type[T]) -> T:
    """Section `section` of the pipeline config at `path`, as dataclass `cls`."""
    return from_dict(cls, read_config(path).get(section), section)
