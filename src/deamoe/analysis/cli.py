"""Commands: table1, budget, loading (Table 1 and Figure 2)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from deamoe.config import ALL_MODEL_NAMES


@dataclass
class AnalysisSettings:
    """The `analysis` section of the pipeline config."""

    models: list[str] = field(default_factory=lambda: list(ALL_MODEL_NAMES))
    loading_tokens: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    )
    loading_trials: int = 64
    seed: int = 0


def _csv_list(text: str, cast=str) -> list:
    return [cast(x) for x in text.split(",") if x.strip()]


def cmd_table1(args) -> int:
    from deamoe.analysis.table1 import table1
    from deamoe.io import write_csv
    from deamoe.provenance import provenance

    models = _csv_list(args.models) if args.models else list(ALL_MODEL_NAMES)
    df = table1(models)
    for key, value in provenance().items():
        df[key] = value
    write_csv(args.out, df)
    for note in df["note"]:
        if note:
            print(f"note: {note}")
    print(f"wrote {args.out} ({len(df)} rows)")
    return 0


def cmd_budget(args) -> int:
    from deamoe.analysis.budget import budget
    from deamoe.config import DeaMoEShape, MoEShape

    base = MoEShape(h=args.h, h_ffn=args.h_ffn, n_expert=args.n_expert, k_expert=args.k_expert,
                    n_shared=args.n_shared)
    dea = DeaMoEShape(
        h=args.h,
        h_ffn=args.h_ffn,
        n_dept=args.n_dept,
        n_expert=args.dea_n_expert,
        k_dept=args.k_dept,
        k_expert=args.dea_k_expert,
        n_shared=args.n_shared,
    )
    print(json.dumps(budget(base, dea)))
    return 0


def cmd_loading(args) -> int:
    from deamoe.analysis.loading import loading_table
    from deamoe.config import table1_row
    from deamoe.io import write_csv
    from deamoe.provenance import provenance
    from deamoe.settings import load_section

    s = load_section(args.config, "analysis", AnalysisSettings) if args.config else AnalysisSettings()
    models = _csv_list(args.models) if args.models else s.models
    for m in models:
        table1_row(m)  # unknown names fail before any work
    tokens = _csv_list(args.tokens, int) if args.tokens else s.loading_tokens
    trials = args.trials or s.loading_trials
    df = loading_table(models, tokens, trials=trials, seed=s.seed)
    for key, value in provenance().items():
        df[key] = value
    write_csv(args.out, df)
    print(f"wrote {args.out} ({len(df)} rows)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("table1", help="Table 1: budget ratios of the paper's configurations + search")
    p.add_argument("--models", help="comma-separated Table 1 model names (default: the paper's "
                   "five, then their '<model>+shared' variants)")
    p.add_argument("--out", required=True, help="output CSV")
    p.set_defaults(func=cmd_table1)

    p = sub.add_parser("budget", help="params/FLOPs of any baseline vs DeaMoE configuration (JSON)")
    for name in ("h", "h-ffn", "n-expert", "k-expert", "n-dept", "dea-n-expert", "k-dept", "dea-k-expert"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--n-shared", type=int, default=0,
                   help="always-active shared experts of width h_ffn in both layers (default 0)")
    p.set_defaults(func=cmd_budget)

    p = sub.add_parser("loading", help="Figure 2: expected loaded expert weights per decoding step")
    p.add_argument("--config", help="pipeline config (reads its `analysis` section)")
    p.add_argument("--models", help="comma-separated model names, '<model>+shared' for the "
                   "real shared experts (default: config, else all presets)")
    p.add_argument("--tokens", help="comma-separated tokens per step (default: config)")
    p.add_argument("--trials", type=int, help="Monte Carlo trials per point (default: config)")
    p.add_argument("--out", required=True, help="output CSV")
    p.set_defaults(func=cmd_loading)
