"""The training runs, built from the config: Table 4's variants and the pre-training ladder.

  ablation-{no1..no6}-s{seed}           one DeaMoE FFN (config `ablation`), varying one choice each,
                                        on the decoder of the size `ablation.size`
  pretrain-{size}-baseline-s{seed}      Baseline-7B's expert shape at that size (`pretrain.sizes`)
  pretrain-{size}-deamoe-s{seed}        its budget-matched DeaMoE (deamoe.analysis.budget.search)
  pretrain-{size}-{model}-s{seed}-{n}steps   the same pair trained for n steps instead of the size's
                                        `steps`: one point of the size's tokens axis (`lengths`)

Every size runs through the same code: its decoder dimensions and FFN pair are data.  All runs
share the data and the optimiser/schedule (`train`); a seed sets the initialisation and the batch
order, and the two models of a pair share it.  Every length is a complete cosine schedule.  A run
whose recipe equals a run of an earlier size (the baseline of a size that changes only DeaMoE's
operator, Table 4's No.1) is not trained twice: `trained_as` names the run it is.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import asdict, dataclass, field, fields

from deamoe import paper
from deamoe.shapes import MODELS, DeaMoEShape, MoEShape
from deamoe.errors import ConfigError
from deamoe.parse import from_dict
from deamoe.train.settings import Settings, SizeSettings, parse_section

# Table 4 of the paper (deamoe.paper) keyed by variant: (operator, expert init, department top-k,
# reported loss) in the config's spelling ("No.2", "RMSNorm" -> "no2", "rmsnorm").
TABLE4 = {
    variant.replace(".", "").lower(): (op.lower(), init.lower(), topk.lower(), loss)
    for variant, op, init, topk, loss in paper.TABLE4
}
PAPER_DISTINCT_DEPARTMENTS_NO1 = paper.DISTINCT_DEPARTMENTS_NO1
# Baseline-7B's expert shape (Table 1): h_ffn / h = 384 / 1024, 32 routed experts, top-8 here
BASELINE_H_FFN_RATIO = 384 / 1024
BASELINE_N_EXPERT, BASELINE_K_EXPERT = 32, 8
DECODER_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
PRETRAIN_RUN = re.compile(
    r"pretrain-(?P<size>[a-z0-9]+)-(?P<model>baseline|deamoe)-s(?P<seed>\d+)(?:-(?P<steps>\d+)steps)?")
ABLATION_RUN = re.compile(r"ablation-(?P<variant>no[1-6])-s(?P<seed>\d+)")

_MOE_KEYS = {"h_ffn", "n_expert", "k_expert", "routed_scaling", "n_shared", "shared_mult"}
_DEAMOE_KEYS = _MOE_KEYS | {"n_dept", "k_dept", "operator", "expert_init", "dept_topk"}
_DEAMOE_REQUIRED = ("h_ffn", "n_dept", "n_expert", "k_dept", "k_expert")


@dataclass(frozen=True)
class RunSpec:
    name: str
    kind: str  # ablation | pretrain
    ffn_type: str  # moe | deamoe
    ffn: dict = field(default_factory=dict)  # FFN fields of DeaMoEConfig (h comes from the decoder)
    steps: int = 0
    paper: dict = field(default_factory=dict)  # the paper's numbers for this run, if any
    size: str = ""
    seed: int = 0
    decoder: dict = field(default_factory=dict)  # hidden_size, layers, heads, kv heads
    lr: float = 0.0  # 0: train.lr
    model: dict = field(default_factory=dict)  # other `model` fields of this size

    def shape(self, hidden_size: int | None = None) -> MoEShape | DeaMoEShape:
        cls = DeaMoEShape if self.ffn_type == "deamoe" else MoEShape
        return cls(h=hidden_size or self.decoder["hidden_size"], **self.ffn)


@dataclass(frozen=True)
class Size:
    """One resolved rung of the ladder."""

    name: str
    decoder: dict
    baseline: MoEShape
    deamoe: DeaMoEShape
    budget: dict  # deamoe.analysis.budget.budget(baseline, deamoe)
    steps: int  # the size's own length: its runs carry no step suffix and get lm-eval
    lr: float
    runs_per_gpu: int
    seeds: tuple[int, ...]
    model: dict
    lengths: tuple[int, ...] = ()  # the tokens axis: `steps` and every further length, ascending
    extra_seeds: dict = field(default_factory=dict)  # {length: seeds run there beside `seeds`}

    def seeds_at(self, steps: int = 0) -> tuple[int, ...]:
        """The seeds of the pairs at length `steps` (0: the size's own)."""
        return self.seeds + self.extra_seeds.get(steps or self.steps, ())


def seeds(settings: Settings, kind: str) -> tuple[int, ...]:
    chosen = getattr(settings, kind).seeds
    return tuple(chosen) or (settings.train.seed,)


def _ffn(where: str, values: dict, keys: set[str]) -> dict:
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping of FFN fields, got {values!r}")
    bad = sorted(set(values) - keys)
    if bad:
        raise ConfigError(f"unknown key {where}.{bad[0]} (known: {', '.join(sorted(keys))})")
    return dict(values)


def _shape(cls, where: str, **values):
    try:
        return cls(**values)
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def size(settings: Settings, name: str) -> Size:
    """Size `name` of pretrain.sizes, its FFN pair resolved and checked against the budget."""
    from deamoe.analysis.budget import budget, search

    p = settings.pretrain
    if name not in p.sizes:
        raise ConfigError(f"unknown size {name!r}; pretrain.sizes has {', '.join(p.sizes)}")
    where = f"pretrain.sizes.{name}"
    z = from_dict(SizeSettings, p.sizes[name], where)
    decoder = {k: getattr(z, k) or getattr(settings.model, k) for k in DECODER_KEYS}
    bad = sorted(set(z.model) & set(DECODER_KEYS))
    if bad:
        raise ConfigError(f"{where}.model.{bad[0]}: set it as {where}.{bad[0]}")
    parse_section("model", {**asdict(settings.model), **z.model})  # names a bad key as model.<key>
    h = decoder["hidden_size"]
    if h % decoder["num_attention_heads"] or decoder["num_attention_heads"] % decoder["num_key_value_heads"]:
        raise ConfigError(f"{where}: hidden_size {h} must split into num_attention_heads "
                          f"{decoder['num_attention_heads']}, a multiple of num_key_value_heads "
                          f"{decoder['num_key_value_heads']}")
    base = {"h_ffn": max(1, round(h * BASELINE_H_FFN_RATIO)), "n_expert": BASELINE_N_EXPERT,
            "k_expert": BASELINE_K_EXPERT, **_ffn(f"{where}.baseline", z.baseline, _MOE_KEYS)}
    baseline = _shape(MoEShape, f"{where}.baseline", h=h, **base)
    dea = _ffn(f"{where}.deamoe", z.deamoe, _DEAMOE_KEYS)
    if any(k in dea for k in _DEAMOE_REQUIRED):
        missing = [k for k in _DEAMOE_REQUIRED if k not in dea]
        if missing:
            raise ConfigError(f"{where}.deamoe: missing key {missing[0]} (give all of "
                              f"{', '.join(_DEAMOE_REQUIRED)}, or none for the budget search's pick)")
        deamoe = _shape(DeaMoEShape, f"{where}.deamoe", h=h, **dea)
    else:  # the search's pick, with the variant fields given (operator, expert_init, ...)
        found = search(baseline)
        if not found:
            raise ConfigError(f"{where}: the budget search finds no DeaMoE within 2% of the baseline "
                              f"{baseline}; give {where}.deamoe explicitly")
        deamoe = _shape(DeaMoEShape, f"{where}.deamoe", **{**asdict(found[0]["shape"]), **dea})
    b = budget(baseline, deamoe)
    tol = p.max_budget_deviation
    for key in ("params_ratio", "flops_ratio"):
        if abs(b[key] - 1) > tol + 1e-12:
            raise ConfigError(f"{where}.deamoe is not budget-matched to its baseline: {key}={b[key]:.4f} "
                              f"(allowed 1 +- pretrain.max_budget_deviation={tol})")
    if z.runs_per_gpu < 1:
        raise ConfigError(f"{where}.runs_per_gpu must be >= 1, got {z.runs_per_gpu}")
    if len(set(z.seeds)) != len(z.seeds) or any(x < 0 for x in z.seeds):
        raise ConfigError(f"{where}.seeds must be distinct integers >= 0, got {list(z.seeds)}")
    if len(set(z.lengths)) != len(z.lengths) or any(n < 1 for n in z.lengths):
        raise ConfigError(f"{where}.lengths must be distinct step counts >= 1, got {list(z.lengths)}")
    steps = z.steps or p.steps or settings.train.steps
    lengths = tuple(sorted({steps, *z.lengths}))
    own_seeds = tuple(z.seeds) or seeds(settings, "pretrain")
    return Size(name, decoder, baseline, deamoe, b, steps, z.lr or settings.train.lr, z.runs_per_gpu,
                own_seeds, dict(z.model), lengths,
                _extra_seeds(f"{where}.extra_seeds", z.extra_seeds, lengths, own_seeds))


def _extra_seeds(where: str, entries, lengths: tuple[int, ...], own: tuple[int, ...]) -> dict:
    """{length: seeds} of a size's extra_seeds, each at a length of the size, new seeds only."""
    out = {}
    for i, e in enumerate(entries):
        at = f"{where}[{i}]"
        if e.steps not in lengths:
            raise ConfigError(f"{at}.steps={e.steps} is not a length of the size (its lengths: "
                              f"{', '.join(map(str, lengths))})")
        if e.steps in out:
            raise ConfigError(f"{at}.steps={e.steps} is given twice; list its seeds in one entry")
        if not e.seeds or len(set(e.seeds)) != len(e.seeds) or any(x < 0 for x in e.seeds):
            raise ConfigError(f"{at}.seeds must be distinct integers >= 0, got {list(e.seeds)}")
        again = sorted(set(e.seeds) & set(own))
        if again:
            raise ConfigError(f"{at}.seeds: seed {again[0]} is already one of the size's seeds "
                              f"({', '.join(map(str, own))})")
        out[e.steps] = tuple(e.seeds)
    return out


def _ffn_fields(shape) -> dict:
    return {f.name: getattr(shape, f.name) for f in fields(shape) if f.name != "h"}


def ablation_size(settings: Settings) -> str:
    return settings.ablation.size or next(iter(settings.pretrain.sizes))


def pretrain_run_name(z: Size, model: str, seed: int, steps: int = 0) -> str:
    """The run of size `z`, model and seed at `steps` (0 or the size's `steps`: no suffix)."""
    suffix = f"-{steps}steps" if steps and steps != z.steps else ""
    return f"pretrain-{z.name}-{model}-s{seed}{suffix}"


def pretrain_run_names(settings: Settings, sizes=None, steps: int = 0) -> list[str]:
    """Every pair of `sizes` (default: all) at each size's own length, or at `steps` (which must
    be on each size's tokens axis)."""
    names = []
    for name in sizes or settings.pretrain.sizes:
        z = size(settings, name)
        if steps and steps not in z.lengths:
            raise ConfigError(f"size {name} has no length of {steps} steps (its lengths: "
                              f"{', '.join(map(str, z.lengths))})")
        names += [pretrain_run_name(z, m, seed, steps) for seed in z.seeds_at(steps) for m in MODELS]
    return names


def axis_lengths(settings: Settings, name: str) -> tuple[int, ...]:
    """The lengths of size `name` beside its own `steps` (each joined on its own)."""
    z = size(settings, name)
    return tuple(n for n in z.lengths if n != z.steps)


def ablation_run_names(settings: Settings) -> list[str]:
    return [f"ablation-{v}-s{seed}" for v in settings.ablation.variants for seed in seeds(settings, "ablation")]


def parse_run(name: str) -> dict:
    """{kind, size, model, seed} (pretrain) or {kind, variant, seed} (ablation) of a run name."""
    m = PRETRAIN_RUN.fullmatch(name)
    if m:
        return {"kind": "pretrain", "size": m["size"], "model": m["model"], "seed": int(m["seed"]),
                "steps": int(m["steps"] or 0)}
    m = ABLATION_RUN.fullmatch(name)
    if m:
        return {"kind": "ablation", "variant": m["variant"], "seed": int(m["seed"])}
    raise ConfigError(f"bad run name {name!r}: expected pretrain-<size>-<baseline|deamoe>-s<seed>"
                      "[-<n>steps] or ablation-<no1..no6>-s<seed>")


def _canonical(name: str, canonical: str) -> None:
    """A ConfigError unless run `name` is written as the plan writes it (a seed without leading
    zeros, no `-0steps`): another spelling would train under a name no summary looks for."""
    if name != canonical:
        raise ConfigError(f"run {name}: write it {canonical} (the name the plan gives this run)")


def run_spec(settings: Settings, name: str) -> RunSpec:
    """The RunSpec called `name` (pretrain-{size}-{model}-s{seed}[-{n}steps] or ablation-{variant}-s{seed})."""
    r = parse_run(name)
    if r["kind"] == "ablation":
        _canonical(name, f"ablation-{r['variant']}-s{r['seed']}")
        if r["seed"] not in seeds(settings, "ablation"):
            raise ConfigError(f"run {name}: seed {r['seed']} is not among the ablation's seeds "
                              f"({', '.join(map(str, seeds(settings, 'ablation')))}: ablation.seeds, "
                              "else train.seed)")
        a = settings.ablation
        z = size(settings, ablation_size(settings))
        op, init, topk, loss = TABLE4[r["variant"]]
        ffn = {k: getattr(a, k) or getattr(z.deamoe, k) for k in _DEAMOE_REQUIRED}
        ffn.update(operator=op, expert_init=init, dept_topk=topk)
        paper_values = {"paper_loss": loss}
        if r["variant"] == "no1":
            paper_values["paper_mean_distinct_departments"] = PAPER_DISTINCT_DEPARTMENTS_NO1
        spec = RunSpec(name, "ablation", "deamoe", ffn, a.steps or settings.train.steps, paper_values,
                       z.name, r["seed"], z.decoder, z.lr, z.model)
        _shape(DeaMoEShape, "ablation", h=z.decoder["hidden_size"], **ffn)  # names the bad field now
        return spec
    z = size(settings, r["size"])
    steps = r["steps"] or z.steps
    if r["steps"] and (steps == z.steps or steps not in z.lengths):
        raise ConfigError(f"run {name}: size {z.name} has no further length of {steps} steps "
                          f"(its own length {z.steps} has no suffix; its lengths: "
                          f"{', '.join(map(str, z.lengths))})")
    _canonical(name, pretrain_run_name(z, r["model"], r["seed"], steps))
    if r["seed"] not in z.seeds_at(steps):
        raise ConfigError(f"run {name}: seed {r['seed']} is not among the seeds of size {z.name} "
                          f"at {steps} steps ({', '.join(map(str, z.seeds_at(steps)))})")
    shape = z.baseline if r["model"] == "baseline" else z.deamoe
    return RunSpec(name, "pretrain", shape.kind, _ffn_fields(shape), steps, {}, z.name, r["seed"],
                   z.decoder, z.lr, z.model)


def _recipe(settings: Settings, r: RunSpec) -> tuple:
    """What a run's trained weights are a function of: length, lr, seed, FFN, decoder, `model`
    fields.  (model_config is a function of exactly these; comparing them instead of the built
    configs keeps deamoe.model (transformers: ~10 s) out of every Snakefile parse.)"""
    return (r.steps, r.lr, r.seed, r.shape(1), r.decoder, dataclasses.replace(settings.model, **r.model))


def trained_as(settings: Settings, name: str) -> str:
    """The run whose training `name` is.  A run identical in recipe to a run already in the plan
    would train the same weights again: it is that run.  So an ablation variant equal to its size's
    DeaMoE pre-training run at that seed and length (variant No.1 when ablation.steps is one of
    the size's lengths) is that run, and a pre-training run equal to the same model, seed and length
    of an earlier size (the baseline of a size that changes only DeaMoE's operator) is that one."""
    spec = run_spec(settings, name)
    if spec.kind == "ablation":
        z = size(settings, spec.size)
        if spec.seed not in z.seeds_at(spec.steps) or spec.steps not in z.lengths:
            return name
        candidates = [pretrain_run_name(z, "deamoe", spec.seed, spec.steps)]
    else:
        model = parse_run(name)["model"]
        candidates = []
        for other in settings.pretrain.sizes:
            if other == spec.size:
                break
            z = size(settings, other)
            if spec.steps in z.lengths and spec.seed in z.seeds_at(spec.steps):
                candidates.append(pretrain_run_name(z, model, spec.seed, spec.steps))
    mine = _recipe(settings, spec)
    return next((c for c in candidates if _recipe(settings, run_spec(settings, c)) == mine), name)


def model_config(settings: Settings, spec: RunSpec, vocab_size: int):
    """The DeaMoEConfig of a run (decoder from `model`, FFN from the run)."""
    from deamoe.model import DeaMoEConfig

    m = dataclasses.replace(settings.model, **spec.model)
    return DeaMoEConfig(
        vocab_size=vocab_size,
        **spec.decoder,
        max_position_embeddings=max(m.max_position_embeddings, settings.train.seq_len),
        rope_theta=m.rope_theta,
        rms_norm_eps=m.rms_norm_eps,
        init_std=m.init_std,
        expert_init_scale=m.expert_init_scale,
        tie_word_embeddings=m.tie_word_embeddings,
        load_balance=m.load_balance,
        aux_loss_coef=m.aux_loss_coef,
        ffn_impl=m.ffn_impl,
        ffn_type=spec.ffn_type,
        **spec.ffn,
    )


def train_flops_per_token(config, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward = 3x forward), for MFU.

    FFN: deamoe.analysis.budget.ffn_flops (DeaMoE at its k_dept cap); attention projections and
    the LM head: 2 per multiply-accumulate; attention scores: 2 * 2 * seq_len * h per layer
    (PaLM's convention, no causal discount).
    """
    from deamoe.analysis.budget import ffn_flops

    h, L = config.hidden_size, config.num_hidden_layers
    kv = config.num_key_value_heads * config.head_dim
    attn_proj = 2 * (2 * h * h + 2 * h * kv)
    attn_scores = 2 * 2 * seq_len * h
    per_layer = attn_proj + attn_scores + ffn_flops(config.ffn_shape())
    return 3.0 * (L * per_layer + 2 * h * config.vocab_size)
