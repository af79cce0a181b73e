"""Checked argparse types: a bad command-line value is one line naming the argument.

Each type raises argparse.ArgumentTypeError, which argparse reports as
`python -m deamoe CMD: error: argument --steps: must be an integer >= 1, got '-5'`
(deamoe.cli.Parser prints that single line and exits with status 2, before any work).
"""

from __future__ import annotations

import argparse

from deamoe.shapes import ALL_MODEL_NAMES, FFN_TYPES, MODELS


def _int(text: str, low: int, high: int | None = None) -> int:
    what = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int(text, 1)


def non_negative_int(text: str) -> int:
    return _int(text, 0)


def int_range(low: int, high: int):
    """The type of a flag taking an integer in [low, high] (a bound keeps a huge value from
    running for days, or from overflowing what it feeds)."""
    return lambda text: _int(text, low, high)


LARGEST_DIMENSION = 2**31 - 1  # a layer's width or count of experts: an int32


def _schema_of(section: str, key: str) -> dict:
    """The schema of config key section.key."""
    from deamoe import schema

    return schema.property_schema(schema.load(section), key)


def _bounds(section: str, key: str) -> tuple[int, int | None]:
    """The range of integer config key section.key (of its items, for a list) in its schema."""
    prop = _schema_of(section, key)
    prop = prop.get("items", prop)
    return prop.get("minimum", 1), prop.get("maximum")


def _distinct(values: list, text: str) -> None:
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise argparse.ArgumentTypeError(f"must be distinct values, got {text!r} ({twice} twice)")


def config_int(section: str, key: str):
    """The type of a flag that overrides integer config key section.key: the schema's range."""
    low, high = _bounds(section, key)
    return lambda text: _int(text, low, high)


def config_int_list(section: str, key: str):
    """The type of a flag that overrides config key section.key, a list of integers given as
    comma-separated values (at least one), each in the schema's range, each once where the
    schema says so (a point given twice would be a row twice)."""
    low, high = _bounds(section, key)
    unique = _schema_of(section, key).get("uniqueItems", False)

    def parse(text: str) -> list[int]:
        items = [x.strip() for x in text.split(",")]
        try:
            if not text.strip() or any(not x for x in items):
                raise argparse.ArgumentTypeError("")
            values = [_int(x, low, high) for x in items]
        except argparse.ArgumentTypeError:
            bound = f" and <= {high}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"must be comma-separated integers >= {low}{bound}, "
                                             f"got {text!r}") from None
        if unique:
            _distinct(values, text)
        return values

    return parse


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def commit_sha(text: str) -> str:
    """A git commit's sha, 7 to 40 hex digits (written into tables' git_sha column)."""
    import re

    if not re.fullmatch(r"[0-9a-f]{7,40}", text.strip().lower()):
        raise argparse.ArgumentTypeError(f"must be a commit's sha (7-40 hex digits, e.g. from "
                                         f"`git rev-parse --short HEAD`), got {text!r}")
    return text.strip().lower()


def output_file(text: str) -> str:
    """A file output's path, not written as a folder's (`x/`, `x/.`: a Path drops the slash, and
    the command would write a file named x; `.` and an existing folder are refused by deamoe.io)."""
    if text.endswith(("/", "/.", "/..")):
        raise argparse.ArgumentTypeError(f"must be a file path, got {text!r} (a folder's)")
    return text


def name_list(text: str) -> list[str]:
    """Comma-separated names, at least one, each once (which names exist is the reader's check)."""
    names = [x.strip() for x in text.split(",")]
    if not any(names) or not all(names):
        raise argparse.ArgumentTypeError(f"an empty name in {text!r} (comma-separated names)")
    _distinct(names, text)
    return names


def model_list(text: str) -> list[str]:
    """Comma-separated Table 1 model names (name_list's rules, each name known)."""
    names = name_list(text)
    bad = [n for n in names if n not in ALL_MODEL_NAMES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown model {bad[0]!r} "
                                         f"(choose from {', '.join(ALL_MODEL_NAMES)})")
    return names


def checkpoint_command(sub, name: str, help: str, section: str, out: str):
    """The parser of a stage command on one checkpoint (eval, serve): the config, the checkpoint,
    the model's name in the results and the output folder; the caller adds the rest."""
    p = sub.add_parser(name, help=help)
    p.add_argument("--config", required=True, help=f"pipeline config YAML (section {section})")
    p.add_argument("--checkpoint", required=True, help="HF checkpoint directory (model + tokenizer)")
    p.add_argument("--model", required=True, choices=MODELS, help="model name in the results: deamoe or baseline")
    p.add_argument("--out", required=True, help=out)
    return p


def checkpoint_dir(checkpoint):
    """`checkpoint` as a Path, or a DataError when it is no checkpoint directory (no
    config.json), naming the checkpoint inside it where it is a training run's folder."""
    from pathlib import Path

    from deamoe.errors import DataError

    path = Path(checkpoint)
    if not (path / "config.json").is_file():
        inside = path / "checkpoint"  # a training run's folder holds its checkpoint there
        hint = f"; the run's checkpoint is {inside}" if (inside / "config.json").is_file() else ""
        raise DataError(f"{path}: not a checkpoint directory (no config.json){hint}")
    return path


def check_checkpoint_model(checkpoint, model: str) -> None:
    """A DataError, before any work, when --model names the other model than the checkpoint holds
    (its config.json's ffn_type): its numbers would fill that model's rows of Tables 2-3 or
    Figure 3 without a word.  A checkpoint of another causal LM (no ffn_type) is taken as named;
    one lacking config.json is named by checkpoint_dir where the command reads it (after its
    outputs are checked)."""
    from pathlib import Path

    from deamoe.errors import DataError
    from deamoe.readers import read_json

    config = Path(checkpoint) / "config.json"
    ffn = read_json(config, "checkpoint config").get("ffn_type") if config.is_file() else None
    if ffn is not None and ffn != FFN_TYPES[model]:
        held = next((m for m, t in FFN_TYPES.items() if t == ffn), None)
        fix = (f"the {held}'s FFN: give --model {held}, or the {model}'s checkpoint" if held
               else f"not one of {', '.join(FFN_TYPES.values())}")
        raise DataError(f"--model {model}, but {config} has ffn_type={ffn!r} ({fix})")


def tables_command(sub, name: str, help: str, section: str, inputs: str, out: str):
    """The parser of a command that joins a stage's per-model results into its tables."""
    p = sub.add_parser(name, help=help)
    p.add_argument("--config", required=True, help=f"pipeline config YAML (section {section})")
    p.add_argument("--in", dest="in_dir", required=True, help=inputs)
    p.add_argument("--out", required=True, help=out)
    return p
