"""Commands `serve` (one checkpoint, all concurrency levels) and `serve-tables` (Figure 3 tables)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("serve", help="vLLM serving benchmark of one checkpoint (Figure 3)")
    p.add_argument("--config", required=True, help="pipeline config YAML (section: serve)")
    p.add_argument("--checkpoint", required=True, help="HF checkpoint directory")
    p.add_argument("--model", required=True, help="model name in the results (deamoe | baseline)")
    p.add_argument("--out", required=True, help="output directory: c<N>.json per concurrency")
    p.add_argument("--log", default=None, help="server log (default logs/serve/<model>.server.log)")
    p.set_defaults(func=_serve)

    t = sub.add_parser("serve-tables", help="tpot.csv and slo.csv (Figure 3 tables) from serve results")
    t.add_argument("--config", required=True, help="pipeline config YAML (section: serve)")
    t.add_argument("--in", dest="inp", required=True, help="results/serve (one dir per model)")
    t.add_argument("--out", required=True, help="output directory for tpot.csv / slo.csv")
    t.set_defaults(func=_tables)


def _serve(args) -> int:
    from deamoe.serve import bench, settings

    s = settings.load(args.config)
    log = Path(args.log or f"logs/serve/{args.model}.server.log")
    rows = bench.run(args.checkpoint, args.model, s, args.out, log)
    for r in rows:
        print(f"{r['model']} c={r['concurrency']}: TPOT mean {r['tpot_mean_ms']:.2f} ms, "
              f"p99 {r['tpot_p99_ms']:.2f} ms, TTFT {r['ttft_ms']:.1f} ms, "
              f"{r['output_tok_s']:.1f} tok/s")
    return 0


def _tables(args) -> int:
    from deamoe.serve import settings, tables

    s = settings.load(args.config)
    from deamoe.settings import read_config

    profile = read_config(args.config).get("profile")
    tpot, slo = tables.write_tables(args.inp, args.out, s, profile=profile)
    print(f"wrote {tpot} and {slo}")
    return 0
