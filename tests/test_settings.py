from dataclasses import dataclass, field

import pytest

from deamoe.errors import ConfigError
from deamoe.settings import from_dict, load_section, read_config


@dataclass
class Inner:
    rate: float = 0.1


@dataclass
class Section:
    steps: int = 10
    name: str = "x"
    flags: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)
    limit: int | None = None


def test_defaults_and_coercion():
    s = from_dict(Section, {"steps": 3, "inner": {"rate": 1}}, "train")
    assert s.steps == 3 and s.inner.rate == 1.0 and s.name == "x"


@pytest.mark.parametrize(
    "data,where",
    [
        ({"step": 3}, "train.step"),
        ({"steps": "3"}, "train.steps"),
        ({"steps": True}, "train.steps"),
        ({"flags": "a"}, "train.flags"),
        ({"flags": [1]}, "train.flags[0]"),
        ({"inner": {"rat": 1}}, "train.inner.rat"),
        ({"limit": "no"}, "train.limit"),
    ],
)
def test_errors_name_the_key(data, where):
    with pytest.raises(ConfigError) as err:
        from_dict(Section, data, "train")
    assert where in str(err.value) and "\n" not in str(err.value)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="cannot be parsed"):
        read_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text("train:\n  steps: 5\n")
    assert load_section(good, "train", Section).steps == 5
    assert load_section(good, "other", Section).steps == 10
