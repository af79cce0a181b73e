"""Command: microbench (kernel correctness battery, read roofline, per-layer and decode benchmarks)."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser(
        "microbench",
        help="H200-style per-layer decode microbenchmark (Figures 4/5) + model-level decode TPOT",
        description="Runs on a CUDA GPU: correctness battery, streaming-read roofline, per-layer "
        "baseline vs DeaMoE decode microbenchmark, model-level decode benchmark. Without CUDA "
        "it writes OUT/status.json saying so and exits 0.",
    )
    p.add_argument("--config", required=True, help="pipeline config YAML (section `microbench`)")
    p.add_argument("--out", required=True, help="output directory (e.g. results/microbench)")
    p.add_argument("--models", help="comma-separated subset of microbench.models")
    p.add_argument("--batches", help="comma-separated batch sizes (overrides microbench.batches)")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: "
                   "battery,roofline,layers,torch,decode,vllm_peer")
    p.add_argument("--tiles-from", help="a microbench.csv (e.g. a committed table) whose per-layer "
                   "picks the decode benchmark uses for models this run does not measure")
    p.set_defaults(func=cmd_microbench)


def cmd_microbench(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    import torch

    from deamoe.bench.microbench import MicrobenchSettings
    from deamoe.io import write_json
    from deamoe.provenance import provenance
    from deamoe.settings import load_section

    s = load_section(args.config, "microbench", MicrobenchSettings)
    if args.models:
        s = dataclasses.replace(s, models=[m.strip() for m in args.models.split(",") if m.strip()])
    if args.batches:
        s = dataclasses.replace(s, batches=[int(b) for b in args.batches.split(",") if b.strip()])
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    unknown = skip - {"battery", "roofline", "layers", "torch", "decode", "vllm_peer"}
    if unknown:
        from deamoe.errors import ConfigError

        raise ConfigError(f"--skip: unknown part(s) {', '.join(sorted(unknown))}")
    tiles_from = Path(args.tiles_from) if args.tiles_from else None
    if tiles_from is not None and not tiles_from.is_file():
        from deamoe.errors import ConfigError

        raise ConfigError(f"--tiles-from: no such file {tiles_from}")
    out = Path(args.out)
    if not torch.cuda.is_available():
        write_json(out / "status.json", {"status": "not run", "reason": "no CUDA GPU",
                                         **provenance("cpu")})
        print(f"no CUDA GPU: wrote {out / 'status.json'}; the report uses the committed tables")
        return 0
    from deamoe.bench.run import run_all

    return run_all(s, out, skip, tiles_from)
