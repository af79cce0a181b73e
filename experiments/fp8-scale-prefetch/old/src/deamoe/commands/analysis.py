"""Commands: table1, budget, loading (Table 1 and Figure 2)."""

from __future__ import annotations

import json

from deamoe.analysis.settings import AnalysisSettings
from deamoe.argtypes import (LARGEST_DIMENSION, config_int, config_int_list, int_range, model_list,
                             output_file)


def cmd_table1(args) -> int:
    from deamoe.analysis.table1 import table1
    from deamoe.io import check_output_file, write_csv
    from deamoe.provenance import provenance
    from deamoe.settings import load_section

    check_output_file(args.out)

    s = load_section(args.config, "analysis", AnalysisSettings) if args.config else AnalysisSettings()
    df = table1(args.models or s.models)
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
    from deamoe.shapes import DeaMoEShape, MoEShape

    from deamoe.errors import ConfigError

    try:
        base = MoEShape(h=args.h, h_ffn=args.h_ffn, n_expert=args.n_expert, k_expert=args.k_expert,
                        n_shared=args.n_shared)
        dea = DeaMoEShape(h=args.h, h_ffn=args.h_ffn, n_dept=args.n_dept, n_expert=args.dea_n_expert,
                          k_dept=args.k_dept, k_expert=args.dea_k_expert,
                          n_shared=args.n_shared)
    except ConfigError as exc:  # name the flags the user typed, not the shape's fields
        text = str(exc)
        for key, flag in (("DeaMoEShape.n_expert", "--dea-n-expert"),
                            ("DeaMoEShape.k_expert", "--dea-k-expert"), ("DeaMoEShape.", "--"), ("MoEShape.", "--")):
            text = text.replace(key, flag)
        raise ConfigError(text.replace("_", "-")) from None
    print(json.dumps(budget(base, dea)))
    return 0


def cmd_loading(args) -> int:
    from deamoe.analysis.loading import loading_table
    from deamoe.io import check_output_file, write_csv
    from deamoe.provenance import provenance
    from deamoe.settings import load_section

    check_output_file(args.out)

    s = load_section(args.config, "analysis", AnalysisSettings) if args.config else AnalysisSettings()
    models = args.models or s.models
    tokens = args.tokens or s.loading_tokens
    trials = args.trials or s.loading_trials
    _check_loading_fits(models, tokens, trials)
    df = loading_table(models, tokens, trials=trials, seed=s.seed)
    for key, value in provenance().items():
        df[key] = value
    write_csv(args.out, df)
    print(f"wrote {args.out} ({len(df)} rows)")
    return 0


def _check_loading_fits(models, tokens, trials) -> None:
    """The largest point's router logits (float32, trials x tokens x experts) and their top-k."""
    from deamoe.memory import check_fits
    from deamoe.shapes import table1_row

    experts = max(max(r.baseline.n_expert, r.deamoe.n_expert) for r in map(table1_row, models))
    check_fits(2 * 4 * trials * max(tokens) * experts, "Figure 2's Monte Carlo",
               "--trials / analysis.loading_trials x the largest of --tokens / analysis.loading_tokens")


def register(sub) -> None:
    p = sub.add_parser("table1", help="Table 1: budget ratios of the paper's configurations + search")
    p.add_argument("--config", help="pipeline config (reads analysis.models)")
    p.add_argument("--models", type=model_list, help="comma-separated Table 1 model names (default: "
                   "config, else the paper's five, then their '<model>+shared' variants)")
    p.add_argument("--out", required=True, type=output_file, help="output CSV")
    p.set_defaults(func=cmd_table1)

    p = sub.add_parser("budget", help="params/FLOPs of any baseline vs DeaMoE configuration (JSON)")
    for name in ("h", "h-ffn", "n-expert", "k-expert", "n-dept", "dea-n-expert", "k-dept", "dea-k-expert"):
        p.add_argument(f"--{name}", type=int_range(1, LARGEST_DIMENSION), required=True)
    p.add_argument("--n-shared", type=int_range(0, LARGEST_DIMENSION), default=0,
                   help="always-active shared experts of width h_ffn in both layers (default 0)")
    p.set_defaults(func=cmd_budget)

    p = sub.add_parser("loading", help="Figure 2: expected loaded expert weights per decoding step")
    p.add_argument("--config", help="pipeline config (reads its `analysis` section)")
    p.add_argument("--models", type=model_list, help="comma-separated model names, '<model>+shared' for "
                   "the real shared experts (default: config, else all presets)")
    p.add_argument("--tokens", type=config_int_list("analysis", "loading_tokens"),
                   help="comma-separated tokens per step (default: config)")
    p.add_argument("--trials", type=config_int("analysis", "loading_trials"),
                   help="Monte Carlo trials per point, >= 2 (default: config)")
    p.add_argument("--out", required=True, type=output_file, help="output CSV")
    p.set_defaults(func=cmd_loading)
