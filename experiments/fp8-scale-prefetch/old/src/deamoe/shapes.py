"""Shapes of the two FFN families and the five Table 1 presets.

`MoEShape` is a standard MoE FFN (n_expert SwiGLU experts of size h x h_ffn, top-k_expert).
`DeaMoEShape` groups n_expert experts into n_dept departments: each department owns gate, up and
down projections of the baseline expert's shape (h_ffn x h); each expert owns three h_ffn x h_ffn
private matrices.  A token picks at most k_dept departments and k_expert experts inside them.

Both may add n_shared always-active shared experts (DeepSeekMoE's shared-expert isolation): plain
SwiGLU FFNs of width shared_mult * h_ffn applied to every token beside the routed part, identical
in the baseline and in DeaMoE.  DeaMoE's departments cover the routed experts only.

These dataclasses are the single source of shapes for the model, the budget formula, the loading
analysis and the kernels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from deamoe.paper import TABLE1 as PAPER_TABLE1
from deamoe.errors import ConfigError

OPERATORS = ("silu", "gelu", "rmsnorm", "none")
EXPERT_INITS = ("identity", "random")
DEPT_TOPK = ("soft", "strict")
MODELS = ("baseline", "deamoe")  # a budget-matched pair: the two models of every run, table and result
FFN_TYPES = {"baseline": "moe", "deamoe": "deamoe"}  # each model's FFN: a checkpoint's config.json ffn_type


def _positive_int(obj, *names: str) -> None:
    cls = type(obj).__name__
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{cls}.{name} must be an integer, got {value!r}")
        if value < 1:
            raise ConfigError(f"{cls}.{name} must be >= 1, got {value}")


def _shared_fields(obj) -> None:
    cls = type(obj).__name__
    for name, low in (("n_shared", 0), ("shared_mult", 1)):
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{cls}.{name} must be an integer >= {low}, got {value!r}")


def _choice(obj, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(obj, name)
    if value not in choices:
        raise ConfigError(
            f"{type(obj).__name__}.{name}={value!r} is not one of {', '.join(choices)}"
        )


def ffn_conflicts(kind: str, v: dict, where: str) -> list[str]:
    """Values of one FFN that conflict with each other, one line each naming `where`.KEY.

    The one statement of these rules: the shapes below raise the first, and the pipeline's config
    check (deamoe.checks) reports all of them for each FFN of the config.
    """
    out = []
    if v["k_expert"] > v["n_expert"]:
        out.append(f"{where}.k_expert={v['k_expert']} must be <= {where}.n_expert={v['n_expert']}")
    if kind == "moe":
        return out
    if v["k_dept"] > v["n_dept"]:
        out.append(f"{where}.k_dept={v['k_dept']} must be <= {where}.n_dept={v['n_dept']}")
    if v["n_expert"] % v["n_dept"]:
        out.append(f"{where}.n_expert={v['n_expert']} must be divisible by {where}.n_dept={v['n_dept']}")
    elif not out and v["k_expert"] > v["k_dept"] * (v["n_expert"] // v["n_dept"]):
        out.append(f"{where}.k_expert={v['k_expert']} exceeds the experts of {where}.k_dept={v['k_dept']} "
                   f"departments ({v['k_dept'] * (v['n_expert'] // v['n_dept'])})")
    if v.get("dept_topk") == "strict" and v["k_expert"] < v["k_dept"]:
        out.append(f"{where}.k_expert={v['k_expert']} must be >= {where}.k_dept={v['k_dept']} "
                   "for dept_topk='strict' (each covered department needs an expert)")
    return out


def _raise_first(obj) -> None:
    problems = ffn_conflicts(obj.kind, dataclasses.asdict(obj), type(obj).__name__)
    if problems:
        raise ConfigError(problems[0])


@dataclass(frozen=True)
class MoEShape:
    """A standard MoE FFN: n_expert SwiGLU experts, each token routed to k_expert of them."""

    h: int
    h_ffn: int
    n_expert: int
    k_expert: int
    routed_scaling: float = 1.0
    n_shared: int = 0  # always-active shared experts beside the routed ones
    shared_mult: int = 1  # width of each shared expert, in multiples of h_ffn

    kind = "moe"

    def __post_init__(self):
        _positive_int(self, "h", "h_ffn", "n_expert", "k_expert")
        _shared_fields(self)
        _raise_first(self)

    @property
    def shared_ffn(self) -> int:
        """Width of the shared experts taken together (n_shared SwiGLUs of shared_mult * h_ffn
        sum to one SwiGLU of their concatenated width)."""
        return self.n_shared * self.shared_mult * self.h_ffn

    def replace(self, **changes) -> "MoEShape":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DeaMoEShape:
    """A DeaMoE FFN: n_dept departments sharing W_g/W_u/W_d, n_expert private A_g/A_u/A_d."""

    h: int
    h_ffn: int
    n_dept: int
    n_expert: int
    k_dept: int
    k_expert: int
    operator: str = "silu"
    expert_init: str = "identity"
    dept_topk: str = "soft"
    routed_scaling: float = 1.0
    n_shared: int = 0  # always-active shared experts, as in the baseline (not in departments)
    shared_mult: int = 1

    kind = "deamoe"

    def __post_init__(self):
        _positive_int(self, "h", "h_ffn", "n_dept", "n_expert", "k_dept", "k_expert")
        _shared_fields(self)
        _choice(self, "operator", OPERATORS)
        _choice(self, "expert_init", EXPERT_INITS)
        _choice(self, "dept_topk", DEPT_TOPK)
        _raise_first(self)

    @property
    def experts_per_dept(self) -> int:
        return self.n_expert // self.n_dept

    shared_ffn = MoEShape.shared_ffn

    def replace(self, **changes) -> "DeaMoEShape":
        return dataclasses.replace(self, **changes)


def shape_from_dict(d: dict) -> MoEShape | DeaMoEShape:
    """Build an FFN shape from a plain dict (config files); unknown keys are errors."""
    d = dict(d)
    kind = d.pop("kind", "deamoe" if "n_dept" in d else "moe")
    cls = {"moe": MoEShape, "deamoe": DeaMoEShape}.get(kind)
    if cls is None:
        raise ConfigError(f"ffn kind={kind!r} is not one of moe, deamoe")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in d:
        if key not in known:
            raise ConfigError(f"unknown {cls.__name__} key {key!r} (known: {', '.join(sorted(known))})")
    return cls(**d)


@dataclass(frozen=True)
class Table1Row:
    """One row of the paper's Table 1: a baseline, its DeaMoE counterpart, the paper's ratios."""

    model: str
    baseline: MoEShape
    deamoe: DeaMoEShape
    paper_flops_ratio: float
    paper_params_ratio: float
    notes: str = field(default="")


def _row(paper_row: tuple) -> Table1Row:
    """A row of deamoe.paper.TABLE1 (its column order) as layer shapes."""
    model, k, h, f, n, d, e, kd, ke, flops, params = paper_row
    return Table1Row(
        model=model,
        baseline=MoEShape(h=h, h_ffn=f, n_expert=n, k_expert=k),
        deamoe=DeaMoEShape(h=h, h_ffn=f, n_dept=d, n_expert=e, k_dept=kd, k_expert=ke),
        paper_flops_ratio=flops,
        paper_params_ratio=params,
    )


# The paper's Table 1 (its numbers: deamoe.paper.TABLE1) as layer shapes, by model name.
TABLE1: dict[str, Table1Row] = {row[0]: _row(row) for row in PAPER_TABLE1}
MODEL_NAMES = tuple(TABLE1)

# Always-active shared experts of the real models, each as wide as a routed expert (DeepSeek-V3
# and Kimi-K2: 1 of width 2048; DeepSeek-V2: 2 of width 1536).  The paper's Table 1 is silent on
# them; its rows above stay as printed and these are explicit variants named "<model>+shared".
SHARED_EXPERTS = {"DeepSeek-V3": 1, "DeepSeek-V2": 2, "Kimi-K2": 1}
SHARED_SUFFIX = "+shared"


def _with_shared(row: Table1Row, n_shared: int) -> Table1Row:
    return dataclasses.replace(
        row,
        model=row.model + SHARED_SUFFIX,
        baseline=row.baseline.replace(n_shared=n_shared),
        deamoe=row.deamoe.replace(n_shared=n_shared),
    )


SHARED_VARIANTS: dict[str, Table1Row] = {
    r.model: r for r in (_with_shared(TABLE1[m], n) for m, n in SHARED_EXPERTS.items())
}
# Every preset a command takes by name: the paper's rows, then their shared-expert variants.
PRESETS: dict[str, Table1Row] = {**TABLE1, **SHARED_VARIANTS}
ALL_MODEL_NAMES = tuple(PRESETS)


def table1_row(model: str) -> Table1Row:
    try:
        return PRESETS[model]
    except KeyError:
        raise ConfigError(f"unknown model {model!r}; choose from {', '.join(ALL_MODEL_NAMES)}") from None
