"""The one loader for the pipeline configuration (config.yaml and the profiles).

A stage command gets `--config PATH` (the whole pipeline config, YAML or JSON) and calls
`load_section(path, "microbench", MicrobenchSettings)` (or a stage's own loader below): the
section becomes a dataclass (deamoe.parse.from_dict: unknown keys and wrong types raise
ConfigError naming `section.key`, missing keys take the dataclass defaults).  Reading the file
runs the whole config's check (deamoe.checks), the one the workflow runs too, so values that
conflict across keys or sections stop every command before it does any work.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from deamoe.checks import check_config
from deamoe.errors import ConfigError
from deamoe.parse import from_dict

T = TypeVar("T")

# Every section of the pipeline config -> the dataclass that holds it, in its stage's settings
# module.  Each class's defaults are the ones in workflow/schemas/<section>.schema.yaml (a test
# walks every section, nested mappings included).  Named, not imported: the report's class sits
# in its build module, which draws with matplotlib, an import no other command should pay.
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


def parse_config_file(path: str | Path, name: str | None = None) -> dict:
    """A pipeline config file's mapping, parsed but not checked (read_config checks it); a
    ConfigError naming the file -- as `name`, by default "config file PATH" -- when it is missing,
    a folder or no regular file, not UTF-8, unparsable, gives a key twice, or is no mapping.  The
    workflow reads config.yaml and its --configfile files through it too."""
    if not str(path).strip():  # Path("") would be the working directory
        raise ConfigError(f"{name or 'config file'} {str(path)!r}: an empty path (an unset variable?); "
                          "give the config YAML file")
    path = Path(path)
    name = name or f"config file {path}"
    if path.is_dir():
        raise ConfigError(f"{name} is a directory; give the config YAML file")
    if not path.is_file():
        what = ("is not a regular file (a device, pipe or socket)" if path.exists() else
                f"is a link to {os.readlink(path)}, which does not exist" if path.is_symlink() else "does not exist")
        raise ConfigError(f"{name} {what}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{name} cannot be read ({exc.strerror})") from None
    from deamoe.readers import load_json, load_yaml

    try:  # both refuse a key given twice
        data = (load_json if path.suffix == ".json" else load_yaml)(text, name)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{name} cannot be parsed: {first}") from None
    if not isinstance(data, dict):
        got = "it is empty" if data is None else f"got a {type(data).__name__}"
        raise ConfigError(f"{name} must be a mapping of sections (profile, analysis, data, ...); "
                          f"{got}: give a mapping at top level (section: settings)")
    return data


def read_config(path: str | Path) -> dict:
    """The whole pipeline config as a dict (parse_config_file), checked (deamoe.checks)."""
    data = parse_config_file(path)
    try:
        check_config(data)
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return data


def load_section(path: str | Path, section: str, cls: type[T]) -> T:
    """Section `section` of the pipeline config at `path`, as dataclass `cls`."""
    return from_dict(cls, read_config(path).get(section), section)


def load_settings(path: str | Path | None = None, doc: dict | None = None):
    """The training sections (data, model, train, ablation, pretrain) of the pipeline config,
    from a file path or an already-read dict, as deamoe.train.settings.Settings.  Either way
    the whole config's check runs first (read_config runs it for a path)."""
    from deamoe.train.settings import parse_settings

    if doc is None:
        doc = read_config(path) if path is not None else {}
    else:
        check_config(doc)
    return parse_settings(doc)


def load_eval_settings(path: str | Path | None):
    """The `eval` section of a pipeline config file (defaults when no file is given)."""
    from deamoe.eval.settings import EvalSettings, parse_eval

    if path is None:
        return EvalSettings()
    return parse_eval(read_config(path).get("eval"))


def load_serve_settings(path: str | Path):
    """The `serve` section of a pipeline config file."""
    from deamoe.serve.settings import ServeSettings

    return load_section(path, "serve", ServeSettings)
