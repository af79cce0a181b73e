"""The eval config section: defaults = schema defaults, and bad keys / types are named."""

from __future__ import annotations

from pathlib import Path

import dataclasses

import pytest
import yaml

from deamoe.errors import ConfigError
from deamoe.eval.settings import EvalSettings, load_eval_settings, parse_eval

# (not imported from conftest: several test folders have one, and which is found depends on order)
REPO = Path(__file__).resolve().parents[2]


def test_schema_matches_dataclass_defaults():
    schema = yaml.safe_load((REPO / "workflow/schemas/eval.schema.yaml").read_text())
    props = schema["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(EvalSettings)}
    assert set(props) == set(fields) and schema["additionalProperties"] is False
    for name, default in fields.items():
        assert props[name]["default"] == (list(default) if isinstance(default, tuple) else default), name
        assert props[name]["description"]


def test_pipeline_config_section_parses():
    s = load_eval_settings(REPO / "config.yaml")
    assert len(s.tasks) == 13 and s.online is False


@pytest.mark.parametrize("values,msg", [
    ({"limt": 3}, r"unknown key eval\.limt"),
    ({"limit": "8"}, r"eval\.limit must be an integer"),
    ({"online": "yes"}, r"eval\.online must be true or false"),
    ({"tasks": ["boolq", "mmlu"]}, r"eval\.tasks must list distinct names"),
    ({"tasks": "boolq"}, r"eval\.tasks must be a list"),
    ({"device": "tpu"}, r"eval\.device must be"),
    ({"num_fewshot": 5}, r"eval\.num_fewshot must be 0 offline"),
    ({"batch_size": 0}, r"eval\.batch_size must be >= 1"),
    ({"limit": -1}, r"eval\.limit must be >= 0"),
])
def test_bad_values_name_the_key(values, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_eval(values)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_eval_settings(tmp_path / "nope.yaml")
