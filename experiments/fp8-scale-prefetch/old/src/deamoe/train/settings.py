"""The pipeline config's sections owned by training: data, model, train, ablation, pretrain.

Each section parses into a frozen dataclass with defaults (the `tiny` profile) through the one
section parser (deamoe.parse); an unknown key or a value of the wrong type is a ConfigError
naming `section.key`.  Values that conflict with each other are checked in deamoe.checks.  The JSON schemas in
workflow/schemas/<section>.schema.yaml describe the same keys for the workflow's validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deamoe.errors import ConfigError
from deamoe.parse import from_dict


SIZE_NAME = re.compile(r"[a-z0-9]+")  # size names go into run names: pretrain-{size}-{model}-s{seed}


@dataclass(frozen=True)
class DataSettings:
    source: str = "bundled"  # bundled | files | redpajama
    files: tuple[str, ...] = ()  # globs for source=files (relative to the working directory)
    max_bytes: int = 0  # 0 = all text; else stop reading after this many bytes of text
    val_fraction: float = 0.02  # the held-out fraction (of every document's tokens, or of documents)
    val_split: str = "tail"  # tail: the end of every document; documents: whole documents
    tokenizer: str = "bpe"  # "bpe": train a byte-level BPE here; else a Hugging Face name / path
    vocab_size: int = 2048
    redpajama_name: str = "togethercomputer/RedPajama-Data-1T-Sample"


@dataclass(frozen=True)
class ModelSettings:
    """The decoder shared by all runs; each run supplies its FFN (see AblationSettings etc.)."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    load_balance: str = "aux_loss"  # aux_loss | bias | none
    aux_loss_coef: float = 0.01
    init_std: float = 0.02
    # the routed experts' matrices start at init_std x this (DeaMoE: its department matrices,
    # whose f x f expert factors start as the identity); 1.0: the same std as every other matrix
    expert_init_scale: float = 1.0
    ffn_impl: str = "torch"  # torch | fast (deamoe.model.layers.IMPLS)


@dataclass(frozen=True)
class TrainSettings:
    device: str = "auto"  # auto | cpu | cuda
    nproc_per_node: int = 1  # > 1: the train command re-launches itself under torchrun + FSDP2
    seq_len: int = 128
    batch_size: int = 8  # sequences per optimiser step, all ranks and micro-steps together
    micro_batch_size: int = 8  # sequences per forward on one rank
    steps: int = 300
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 30
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    bf16: bool = True  # bf16 autocast on CUDA (the CPU always runs float32)
    compile: bool = False  # torch.compile each decoder layer and the loss (GPU profiles)
    seed: int = 0
    checkpoint_every: int = 100  # resume state every N steps (0: never)
    eval_every: int = 0  # held-out loss every N steps (0: only at the end)
    eval_batches: int = 8
    log_every: int = 1  # read the step's numbers on the host every N steps (each read is a sync)
    threads: int = 1  # torch CPU threads per process (0: torch's default)


@dataclass(frozen=True)
class AblationSettings:
    """Table 4: variants No.1-No.6 of one DeaMoE FFN, identical except for the varied choice."""

    size: str = ""  # the decoder: a name in pretrain.sizes ("" = the first)
    # The DeaMoE FFN (0 = that size's budget-matched DeaMoE, field by field)
    h_ffn: int = 0
    n_dept: int = 0
    n_expert: int = 0
    k_dept: int = 0
    k_expert: int = 0
    steps: int = 0  # 0: train.steps
    last_n: int = 50  # Table 4's loss: mean training loss over the last N steps (paper: 200)
    variants: tuple[str, ...] = ("no1", "no2", "no3", "no4", "no5", "no6")
    seeds: tuple[int, ...] = ()  # one run per variant and seed (empty: train.seed)


@dataclass(frozen=True)
class LengthSeeds:
    """More seeds of a size's pairs at one length of its tokens axis (a tighter interval there
    without training every length again)."""

    steps: int = 0  # one of the size's lengths (or its own steps)
    seeds: tuple[int, ...] = ()  # beside the size's seeds


@dataclass(frozen=True)
class SizeSettings:
    """One rung of the pre-training ladder: its decoder and FFN pair (0 / empty = derived)."""

    hidden_size: int = 0  # 0: model.hidden_size (likewise the three below)
    num_hidden_layers: int = 0
    num_attention_heads: int = 0
    num_key_value_heads: int = 0
    # Baseline MoE FFN fields (h_ffn, n_expert, k_expert, routed_scaling); missing ones follow
    # Baseline-7B's expert shape: h_ffn = hidden_size * 384 / 1024, 32 experts, top-8.
    baseline: dict = field(default_factory=dict)
    # DeaMoE FFN fields; empty: the best budget-matched shape of deamoe.analysis.budget.search.
    deamoe: dict = field(default_factory=dict)
    seeds: tuple[int, ...] = ()  # empty: pretrain.seeds
    steps: int = 0  # 0: pretrain.steps (0: train.steps)
    # The tokens axis: further lengths (steps) of every pair, each a complete cosine schedule
    lengths: tuple[int, ...] = ()
    extra_seeds: tuple[LengthSeeds, ...] = ()  # more seeds at some of those lengths
    lr: float = 0.0  # 0: train.lr (the pair always shares it)
    # Other `model` fields for this size (e.g. aux_loss_coef, init_std): a sweep is a set of sizes
    model: dict = field(default_factory=dict)
    runs_per_gpu: int = 1  # runs of this size that share one GPU at a time (the workflow's gpu_slots)


@dataclass(frozen=True)
class PretrainSettings:
    """The ladder: DeaMoE against its budget-matched baseline at each size and seed."""

    sizes: dict = field(default_factory=lambda: {"tiny": {}})  # name -> SizeSettings fields
    seeds: tuple[int, ...] = ()  # every pair is trained once per seed (empty: train.seed)
    steps: int = 0  # 0: train.steps
    max_budget_deviation: float = 0.02  # |params ratio - 1| and |FLOPs ratio - 1| allowed


SECTIONS = {
    "data": DataSettings,
    "model": ModelSettings,
    "train": TrainSettings,
    "ablation": AblationSettings,
    "pretrain": PretrainSettings,
}


def parse_section(section: str, values: dict | None):
    """Build the dataclass of `section` from a dict; unknown keys and wrong types are errors."""
    settings = from_dict(SECTIONS[section], values, section)
    _check(section, settings)
    return settings


def _check(section: str, s) -> None:
    def need(cond: bool, key: str, msg: str):
        if not cond:
            raise ConfigError(f"{section}.{key} {msg}, got {getattr(s, key)!r}")

    if section == "data":
        need(s.source in ("bundled", "files", "redpajama"), "source", "must be bundled, files or redpajama")
        need(0 < s.val_fraction < 0.5, "val_fraction", "must be in (0, 0.5)")
        need(s.val_split in ("tail", "documents"), "val_split", "must be tail or documents")
        need(s.vocab_size >= 260, "vocab_size", "must be >= 260 (256 bytes + special tokens)")
        need(s.max_bytes >= 0, "max_bytes", "must be >= 0")
    elif section == "model":
        need(s.load_balance in ("aux_loss", "bias", "none"), "load_balance", "must be aux_loss, bias or none")
        need(s.init_std > 0, "init_std", "must be > 0")
        need(s.expert_init_scale > 0, "expert_init_scale", "must be > 0")
        need(s.ffn_impl in ("torch", "fast"), "ffn_impl", "must be torch or fast")
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "max_position_embeddings"):
            need(getattr(s, key) >= 1, key, "must be >= 1")
    elif section == "train":
        need(s.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
        for key in ("seq_len", "batch_size", "micro_batch_size", "steps", "nproc_per_node", "log_every"):
            need(getattr(s, key) >= 1, key, "must be >= 1")
        need(s.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        need(s.lr > 0, "lr", "must be > 0")
    elif section == "pretrain":
        need(isinstance(s.sizes, dict) and len(s.sizes) > 0, "sizes", "must map at least one size name to its settings")
        for name, values in s.sizes.items():
            if not (isinstance(name, str) and SIZE_NAME.fullmatch(name)):
                raise ConfigError(f"pretrain.sizes: bad size name {name!r} (lower-case letters and digits only)")
            from_dict(SizeSettings, values, f"pretrain.sizes.{name}")
        need(len(set(s.seeds)) == len(s.seeds) and all(x >= 0 for x in s.seeds), "seeds", "must be distinct integers >= 0")
    elif section == "ablation":
        bad = [v for v in s.variants if v not in ("no1", "no2", "no3", "no4", "no5", "no6")]
        need(not bad, "variants", "must list names among no1..no6")
        need(s.last_n >= 1, "last_n", "must be >= 1")
        need(len(set(s.seeds)) == len(s.seeds) and all(x >= 0 for x in s.seeds), "seeds", "must be distinct integers >= 0")


@dataclass(frozen=True)
class Settings:
    profile: str
    data: DataSettings
    model: ModelSettings
    train: TrainSettings
    ablation: AblationSettings
    pretrain: PretrainSettings


def parse_settings(doc: dict) -> Settings:
    """The training sections of the pipeline config `doc` (deamoe.settings.load_settings reads
    and checks the whole config first)."""
    s = Settings(
        profile=str(doc.get("profile", "tiny")),
        **{name: parse_section(name, doc.get(name)) for name in SECTIONS},
    )
    if s.ablation.size and s.ablation.size not in s.pretrain.sizes:
        raise ConfigError(f"ablation.size {s.ablation.size!r} is not in pretrain.sizes "
                          f"({', '.join(s.pretrain.sizes)})")
    return s
