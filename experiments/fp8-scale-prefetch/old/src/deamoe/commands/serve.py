"""Commands `serve` (one checkpoint, all concurrency levels) and `serve-tables` (Figure 3 tables)."""

from __future__ import annotations

from pathlib import Path

from deamoe.argtypes import check_checkpoint_model, checkpoint_command, output_file, tables_command


def register(sub) -> None:
    p = checkpoint_command(sub, "serve", "vLLM serving benchmark of one checkpoint (Figure 3)", "serve",
                           "output directory: c<N>.json per concurrency")
    p.add_argument("--log", default=None, type=output_file, help="server log; the client's log goes beside it "
                   "(default: OUT.server.log, beside the output folder)")
    p.set_defaults(func=_serve)

    t = tables_command(sub, "serve-tables", "tpot.csv and slo.csv (Figure 3 tables) from serve results",
                       "serve", "results/serve (one dir per model)", "output directory for tpot.csv / slo.csv")
    t.set_defaults(func=_tables)


def _serve(args) -> int:
    from deamoe.io import output_lock
    from deamoe.serve import bench
    from deamoe.settings import load_serve_settings

    s = load_serve_settings(args.config)
    # beside the output, never in the working directory (the pipeline names logs/serve/<model>)
    log = Path(args.log or f"{Path(args.out)}.server.log")
    check_checkpoint_model(args.checkpoint, args.model)
    bench.check_serve_outputs(Path(args.out), log, args.model, Path(args.checkpoint))
    with output_lock(args.out, what="another `python -m deamoe serve`"):
        rows = bench.run(args.checkpoint, args.model, s, args.out, log)
    for r in rows:
        print(f"{r['model']} c={r['concurrency']}: TPOT mean {r['tpot_mean_ms']:.2f} ms, "
              f"p99 {r['tpot_p99_ms']:.2f} ms, TTFT {r['ttft_ms']:.1f} ms, "
              f"{r['output_tok_s']:.1f} tok/s")
    return 0


def _tables(args) -> int:
    from deamoe.io import check_outputs, folder_lock
    from deamoe.serve import tables
    from deamoe.settings import load_serve_settings, read_config

    s = load_serve_settings(args.config)
    profile = read_config(args.config).get("profile")
    check_outputs(files=[Path(args.out) / "tpot.csv", Path(args.out) / "slo.csv"], folders=[args.out])
    with folder_lock(args.out, what="another `python -m deamoe serve-tables`"):
        tpot, slo = tables.write_tables(args.in_dir, args.out, s, profile=profile)
    print(f"wrote {tpot} and {slo}")
    return 0
