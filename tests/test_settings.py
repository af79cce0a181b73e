import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from deamoe.errors import ConfigError
from deamoe.parse import from_dict
from deamoe.settings import load_section, read_config


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
    with pytest.raises(ConfigError, match="config file '': an empty path"):  # not the working directory
        read_config("")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="cannot be parsed"):
        read_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text("train:\n  steps: 5\n")
    assert load_section(good, "train", Section).steps == 5
    assert load_section(good, "other", Section).steps == 10


def test_a_config_that_is_a_link_to_nothing_is_named_as_a_link(tmp_path):
    """A link whose file was moved: "does not exist" sent the user looking for a typo in a name
    that is there."""
    (tmp_path / "c.yaml").symlink_to("moved.yaml")
    with pytest.raises(ConfigError, match=r"c.yaml is a link to moved.yaml, which does not exist$"):
        read_config(tmp_path / "c.yaml")


REPO = Path(__file__).resolve().parents[1]


def _default(value):
    """A dataclass default as the schema writes it (tuples are YAML lists)."""
    if isinstance(value, tuple):
        return [_default(v) for v in value]
    if isinstance(value, dict):
        return {k: _default(v) for k, v in value.items()}
    return value


def _field_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out[f.name] = _default(value)
    return out


def _assert_schema_is_dataclass(props: dict, cls, where: str) -> None:
    fields = _field_defaults(cls)
    assert set(props) == set(fields), f"{where}: schema {sorted(props)} vs {cls.__name__} {sorted(fields)}"
    for name, default in fields.items():
        assert props[name].get("description"), f"{where}.{name} has no description"
        assert props[name]["default"] == default, f"{where}.{name}: schema {props[name]['default']!r} vs {default!r}"


def test_every_section_has_one_dataclass_whose_defaults_are_the_schema_defaults():
    from deamoe.settings import SECTIONS, section_class
    from deamoe.train.settings import SizeSettings

    top = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    assert set(top["properties"]) == {"profile", *SECTIONS}
    for section in SECTIONS:
        schema = yaml.safe_load((REPO / f"workflow/schemas/{section}.schema.yaml").read_text())
        assert schema["additionalProperties"] is False, section
        _assert_schema_is_dataclass(schema["properties"], section_class(section), section)
    # the one nested section of settings: each rung of the pre-training ladder
    sizes = yaml.safe_load((REPO / "workflow/schemas/pretrain.schema.yaml").read_text())
    _assert_schema_is_dataclass(sizes["properties"]["sizes"]["additionalProperties"]["properties"],
                                SizeSettings, "pretrain.sizes.<size>")
