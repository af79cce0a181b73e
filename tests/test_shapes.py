import pytest

from deamoe.shapes import DeaMoEShape, MoEShape, shape_from_dict, table1_row
from deamoe.errors import ConfigError


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(k_dept=5, n_dept=4), "k_dept"),
        (dict(n_expert=30, n_dept=4), "n_expert"),
        (dict(operator="tanh"), "operator"),
        (dict(expert_init="zeros"), "expert_init"),
        (dict(dept_topk="hard"), "dept_topk"),
        (dict(h=0), "h"),
        (dict(h_ffn=2.5), "h_ffn"),
    ],
)
def test_bad_deamoe_shape_names_the_field(kwargs, field):
    base = dict(h=16, h_ffn=8, n_dept=4, n_expert=16, k_dept=2, k_expert=4)
    base.update(kwargs)
    with pytest.raises(ConfigError) as err:
        DeaMoEShape(**base)
    msg = str(err.value)
    assert field in msg and "\n" not in msg


def test_moe_shape_k_too_large():
    with pytest.raises(ConfigError, match="k_expert"):
        MoEShape(h=8, h_ffn=4, n_expert=4, k_expert=5)


def test_shape_from_dict_rejects_unknown_key():
    with pytest.raises(ConfigError, match="n_experts"):
        shape_from_dict({"h": 8, "h_ffn": 4, "n_experts": 4, "k_expert": 2})
    assert shape_from_dict({"h": 8, "h_ffn": 4, "n_expert": 4, "k_expert": 2}).kind == "moe"


def test_unknown_model():
    with pytest.raises(ConfigError, match="Mixtral"):
        table1_row("Mixtral")
