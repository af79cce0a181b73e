"""The eval config section: bad keys / types are named (defaults = schema: tests/test_settings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deamoe.errors import ConfigError
from deamoe.eval.settings import parse_eval
from deamoe.settings import load_eval_settings

# (not imported from conftest: several test folders have one, and which is found depends on order)
REPO = Path(__file__).resolve().parents[2]


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
