"""The eight training runs, built from the config: Table 4's variants and the pre-training pair.

  ablation-no1 .. ablation-no6   one DeaMoE FFN (config `ablation`), varying one choice each
  pretrain-baseline              the scaled Baseline-7B-family MoE (config `pretrain.baseline`)
  pretrain-deamoe                its budget-matched DeaMoE (config `pretrain.deamoe`)

All runs share the decoder (`model`), the data and the optimiser/schedule/seed (`train`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deamoe import paper
from deamoe.config import DeaMoEShape, MoEShape
from deamoe.errors import ConfigError
from deamoe.train.settings import Settings

# Table 4 of the paper (deamoe.paper) keyed by variant: (operator, expert init, department top-k,
# reported loss) in the config's spelling ("No.2", "RMSNorm" -> "no2", "rmsnorm").
TABLE4 = {
    variant.replace(".", "").lower(): (op.lower(), init.lower(), topk.lower(), loss)
    for variant, op, init, topk, loss in paper.TABLE4
}
PAPER_DISTINCT_DEPARTMENTS_NO1 = paper.DISTINCT_DEPARTMENTS_NO1
RUN_NAMES = tuple(f"ablation-{v}" for v in TABLE4) + ("pretrain-baseline", "pretrain-deamoe")

_MOE_KEYS = {"h_ffn", "n_expert", "k_expert", "routed_scaling"}
_DEAMOE_KEYS = _MOE_KEYS | {"n_dept", "k_dept", "operator", "expert_init", "dept_topk"}


@dataclass(frozen=True)
class RunSpec:
    name: str
    kind: str  # ablation | pretrain
    ffn_type: str  # moe | deamoe
    ffn: dict = field(default_factory=dict)  # FFN fields of DeaMoEConfig (h comes from model)
    steps: int = 0
    paper: dict = field(default_factory=dict)  # the paper's numbers for this run, if any

    def shape(self, hidden_size: int) -> MoEShape | DeaMoEShape:
        cls = DeaMoEShape if self.ffn_type == "deamoe" else MoEShape
        return cls(h=hidden_size, **self.ffn)


def _ffn(section: str, values: dict, keys: set[str]) -> dict:
    bad = sorted(set(values) - keys)
    if bad:
        raise ConfigError(f"unknown key {section}.{bad[0]} (known: {', '.join(sorted(keys))})")
    return dict(values)


def run_spec(settings: Settings, name: str) -> RunSpec:
    """The RunSpec called `name` (one of RUN_NAMES)."""
    if name not in RUN_NAMES:
        raise ConfigError(f"unknown run {name!r}; choose from {', '.join(RUN_NAMES)}")
    train_steps = settings.train.steps
    if name.startswith("ablation-"):
        a = settings.ablation
        variant = name.removeprefix("ablation-")
        op, init, topk, loss = TABLE4[variant]
        ffn = dict(h_ffn=a.h_ffn, n_dept=a.n_dept, n_expert=a.n_expert, k_dept=a.k_dept,
                   k_expert=a.k_expert, operator=op, expert_init=init, dept_topk=topk)
        paper = {"paper_loss": loss}
        if variant == "no1":
            paper["paper_mean_distinct_departments"] = PAPER_DISTINCT_DEPARTMENTS_NO1
        spec = RunSpec(name, "ablation", "deamoe", ffn, a.steps or train_steps, paper)
    else:
        p = settings.pretrain
        which = name.removeprefix("pretrain-")
        if which == "baseline":
            ffn = _ffn("pretrain.baseline", p.baseline, _MOE_KEYS)
            spec = RunSpec(name, "pretrain", "moe", ffn, p.steps or train_steps)
        else:
            ffn = _ffn("pretrain.deamoe", p.deamoe, _DEAMOE_KEYS)
            spec = RunSpec(name, "pretrain", "deamoe", ffn, p.steps or train_steps)
    spec.shape(settings.model.hidden_size)  # ConfigError now, naming the bad FFN field
    return spec


def pretrain_budget(settings: Settings) -> dict:
    """Budget of the pre-training pair (deamoe.analysis.budget); checks it is ~matched."""
    from deamoe.analysis.budget import budget

    h = settings.model.hidden_size
    b = budget(run_spec(settings, "pretrain-baseline").shape(h), run_spec(settings, "pretrain-deamoe").shape(h))
    tol = settings.pretrain.max_budget_deviation
    for key in ("params_ratio", "flops_ratio"):
        if abs(b[key] - 1) > tol:
            raise ConfigError(
                f"pretrain.deamoe is not budget-matched to pretrain.baseline: {key}={b[key]:.3f} "
                f"(allowed 1 +- pretrain.max_budget_deviation={tol})"
            )
    return b


def model_config(settings: Settings, spec: RunSpec, vocab_size: int):
    """The DeaMoEConfig of a run (decoder from `model`, FFN from the run)."""
    from deamoe.model import DeaMoEConfig

    m = settings.model
    return DeaMoEConfig(
        vocab_size=vocab_size,
        hidden_size=m.hidden_size,
        num_hidden_layers=m.num_hidden_layers,
        num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_key_value_heads,
        max_position_embeddings=max(m.max_position_embeddings, settings.train.seq_len),
        rope_theta=m.rope_theta,
        rms_norm_eps=m.rms_norm_eps,
        init_std=m.init_std,
        tie_word_embeddings=m.tie_word_embeddings,
        load_balance=m.load_balance,
        aux_loss_coef=m.aux_loss_coef,
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
