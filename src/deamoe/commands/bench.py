"""Commands: microbench (the pipeline's kernel stage) and bench (GPU checks, A/B and peer tools).

  microbench            correctness battery, read roofline, per-layer and decode benchmarks
  bench picks-check     the committed picks against the float32 reference, eager and in a graph
  bench stream-check    the stream options (split_launches, dense_dept_up, dense_parts) likewise
  bench routing-check   the routing kernel against deamoe.routing.route, and its time
  bench fp8-check       FP8 weights: battery, stream options, CUDA graphs, vLLM's FP8 path beside
  bench smem-check      the search's shared-memory estimate against Triton's count, per kernel
  bench variants        A/B of knob sets on the committed picks, same routings, interleaved
  bench trace           kernel timeline of the committed layers inside their CUDA graph
  bench read-sizes      streaming-read bandwidth by read size (reports/measured/h200/read_sizes.csv)
  bench overread        CPU: what the dense department GEMM reads beyond the routing's bytes
  bench import          a device run's tables into reports/measured/h200/
  bench peer            vLLM's own fused-MoE kernel beside our baseline (extract, check, run)
  bench train           training throughput: FFN layers forward+backward, whole steps, FSDP2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from deamoe.errors import ConfigError, not_a_file

TABLE = "reports/measured/h200/microbench.csv"
# what `microbench` writes into its --out folder
MICROBENCH_OUTPUTS = ("status.json", "roofline.json", "battery.csv", "microbench.csv", "stages.csv",
                      "microbench_points.csv", "microbench_fp8.csv", "decode_tpot.csv",
                      "vllm_peer.csv", "vllm_kernel/vllm_fused_moe.py")
# where `bench peer extract` writes vLLM's kernel (git-ignored; carried to a GPU without vLLM)
PEER_KERNEL = Path(".peer/vllm_fused_moe.py")

from deamoe.argtypes import commit_sha, config_int_list, int_range, model_list, name_list

ROUNDS = int_range(1, 100)  # interleaved timing rounds: a bound keeps a typo from running for days


def _precisions(text: str) -> tuple[str, ...]:
    """Comma-separated weight precisions (deamoe.kernels.fp8.PRECISIONS), each once."""
    from deamoe.kernels.fp8 import PRECISIONS

    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in PRECISIONS]
    if not names or bad:
        what = f"unknown precision {bad[0]!r}" if bad else "no precision given"
        raise argparse.ArgumentTypeError(f"{what} (choose from {', '.join(PRECISIONS)})")
    return names


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
    p.add_argument("--models", type=model_list, help="comma-separated subset of microbench.models")
    p.add_argument("--batches", type=config_int_list("microbench", "batches"),
                   help="comma-separated batch sizes (overrides microbench.batches)")
    p.add_argument("--weight-dtype", type=_precisions, help="comma-separated weight precisions "
                   "(overrides microbench.weight_dtype): bf16, fp8, fp8-w8a8")
    p.add_argument("--skip", type=name_list, default=[], help="comma-separated parts to skip: "
                   "battery,roofline,layers,torch,decode,vllm_peer")
    p.add_argument("--tiles-from", help="a microbench.csv (e.g. a committed table) whose per-layer "
                   "picks the decode benchmark uses for models this run does not measure")
    p.add_argument("--merge-decode-into", help="a decode_tpot.csv (e.g. a copy of the committed "
                   "table) into which this run's decode_tpot.csv is merged: its rows replace those "
                   "of the same (model, batch), the others are kept")
    p.set_defaults(func=cmd_microbench)
    _register_bench(sub)


def _register_bench(sub) -> None:
    b = sub.add_parser("bench", help="GPU checks, A/B and peer tools of the decode kernels",
                       description=__doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    tools = b.add_subparsers(dest="tool", metavar="tool", required=True)

    def tool(name, func, help, out=True):
        t = tools.add_parser(name, help=help, description=help)
        if out:
            t.add_argument("out", type=Path, help="output directory")
        t.set_defaults(func=func)
        return t

    t = tool("picks-check", _picks_check, "CUDA: every committed pick with a stream schedule "
             "(--all: every pick of both layers) against the float32 reference, eagerly as a "
             "battery case and as two CUDA-graph replays -> OUT/picks_check.csv; exit 1 on a "
             "failure")
    t.add_argument("--table", default=TABLE, help="the microbench.csv whose picks are checked")
    t.add_argument("--all", action="store_true", help="every pick, baseline and DeaMoE")
    tool("stream-check", _stream_check, "CUDA: the battery's cases with each stream option of "
         "both layers, and the graph-captured step -> OUT/stream_check.csv; exit 1 on a failure")
    t = tool("fp8-check", _fp8_check, "CUDA: block-scaled FP8 weights -- the battery against "
             "the dequantised reference, the stream options, the step in CUDA graphs and vLLM's "
             "FP8 block path beside ours -> OUT/fp8_check.csv; exit 1 on a failure")
    t.add_argument("--weight-dtype", type=_precisions, default=("fp8", "fp8-w8a8"),
                   help="comma-separated FP8 precisions: fp8, fp8-w8a8")
    t.add_argument("--models", type=model_list, default="DeepSeek-V3,Qwen3-235B-A22B",
                   help="Table 1 models whose layers are checked")
    t.add_argument("--kernel", type=Path, help=f"vLLM's kernel file (bench peer extract; default "
                   f"{PEER_KERNEL}, and that part not run while it is absent)")
    tool("routing-check", _routing_check, "CUDA: the routing kernel against "
         "deamoe.routing.route on every Table 1 shape -> OUT/routing_check.csv, routing_time.csv")
    t = tool("smem-check", _smem_check, "CUDA: each GEMM of both layers compiled (not run) on "
             "every tile at every BLOCK_M, Triton's shared memory beside the estimate the search "
             "skips knob sets by -> OUT/smem_check.csv; exit 1 where the estimate exceeds it")
    t.add_argument("--tiles", type=name_list, help="comma-separated tile names (default: "
                   "microbench.tiles' defaults; for FP8 weights microbench.fp8_tiles')")
    t.add_argument("--gemms", type=name_list,
                   default="w13,w2,dept_up,expert_up,expert_down,dept_down",
                   help="comma-separated GEMMs of the two layers")
    t.add_argument("--weight-dtype", type=_precisions, default=("bf16",),
                   help="comma-separated weight precisions: bf16, fp8, fp8-w8a8 (FP8: "
                   "microbench.fp8_block's scale blocks)")
    t = tool("variants", _variants, "CUDA: knob sets timed on the committed picks -> "
             "OUT/variants.csv")
    t.add_argument("items", nargs="+", metavar="VARIANT|POINT",
                   help="[moe/]NAME:KNOB=VALUE[,KNOB=VALUE...] (VALUE '+sfx': the committed "
                   "tile with -sfx appended, its flags or counts set: '+s3', '+qs') or "
                   "MODEL:BATCH")
    t.add_argument("--table", default=TABLE)
    t.add_argument("--rounds", type=ROUNDS, default=2, help="interleaved rounds (the best kept)")
    t.add_argument("--weight-dtype", type=_precisions, default=("bf16",),
                   help="the layers' weight precision, one of bf16, fp8, fp8-w8a8 (FP8: the "
                   "table's picks of that weight_dtype, e.g. microbench_fp8.csv; a table of "
                   "bf16 picks: those with BLOCK_K fitted to the scale blocks, said first)")
    t = tool("trace", _trace, "CUDA: kernel timeline (stream, start, duration, idle gap) of the "
             "picked layers in their CUDA graph -> OUT/trace.csv")
    t.add_argument("--table", default=TABLE)
    t.add_argument("--models", type=model_list, default="Baseline-7B,DeepSeek-V3,Qwen3-235B-A22B")
    t.add_argument("--batches", type=config_int_list("microbench", "batches"), default="4,16,64,128")
    t.add_argument("--copies", type=int_range(1, 64), help="layer copies per graph (default: 4 for "
                   "Baseline-7B, 1 for the larger models; at most 64)")
    tool("read-sizes", _read_sizes, "CUDA: streaming read by read size -> OUT/read_sizes.csv")
    t = tool("overread", _overread, "CPU: distinct departments and the dense department GEMM's "
             "bytes beyond them at 4 / 8 / 16 tokens -> OUT/dense_overread.csv")
    t.add_argument("--draws", type=int_range(1, 10**6), default=2000,
                   help="routings drawn per model and batch (at most 10^6: about an hour)")
    t = tool("import", _import, "copy a device run's tables (several parts of one run: "
             "concatenated) into --dest, git_sha 'unknown' replaced by --sha; a microbench.csv "
             "with '<model>+shared' layers goes to microbench_shared.csv", out=False)
    t.add_argument("dirs", nargs="+", type=Path)
    t.add_argument("--sha", type=commit_sha, help="the commit the device's tree matched (default: HEAD)")
    t.add_argument("--dest", type=Path, default=Path("reports/measured/h200"))
    t.add_argument("--merge", action="store_true",
                   help="keep --dest's rows of the points the run did not measure (a partial "
                        "re-measurement: other models, batches or weight precisions)")
    t = tool("train", _train, "CUDA: FFN layers forward+backward beside torch._grouped_mm and a "
             "dense FFN of equal FLOPs, whole training steps (tokens/s, MFU, stages) -> "
             "OUT/train_throughput.csv; with --parts fsdp under torchrun: the FSDP2 step -> "
             "OUT/train_fsdp_throughput.csv; --parts kernels: the layer paths by kernel -> "
             "OUT/train_layer_kernels.csv")
    t.add_argument("--config", default="workflow/profiles/gpu/train-sections.yaml",
                   help="training config: the layers and runs of its largest pretrain size")
    t.add_argument("--parts", type=name_list, default="layer,step", help="comma-separated: layer, step, fsdp, kernels")
    t.add_argument("--paths", type=name_list, default="torch,fast+compile",
                   help="comma-separated step paths: torch, fast, fast+compile")
    t.add_argument("--tokens", type=int_range(1, 2**20), default=32768, help="tokens per layer call")
    t.add_argument("--steps", type=int_range(1, 10**4), default=10,
                   help="timed steps per run and path (at most 10^4)")
    _register_peer(tools)


def _register_peer(tools) -> None:
    p = tools.add_parser("peer", help="vLLM's fused-MoE kernel beside our baseline",
                         description="extract: copy vLLM's kernel where vLLM is installed; "
                         "check: the peer path against a reference; run: time it on CUDA")
    steps = p.add_subparsers(dest="step", required=True)
    ex = steps.add_parser("extract", help="copy vLLM's fused-MoE kernel and default config "
                          "verbatim from the installed vLLM into one file")
    ex.add_argument("--to", type=Path, default=PEER_KERNEL)
    ch = steps.add_parser("check", help="the peer path against a reference (CPU or GPU): "
                          "bf16, and vLLM's FP8 block path beside ours on the same FP8 weights")
    ch.add_argument("--kernel", type=Path, default=PEER_KERNEL)
    rn = steps.add_parser("run", help="CUDA: OUT MODEL:BATCH ... -> OUT/vllm_peer.csv "
                          "('<model>+shared': vLLM's shared-expert MLP beside its fused MoE)")
    rn.add_argument("out", type=Path)
    rn.add_argument("points", nargs="+", help="MODEL:BATCH")
    rn.add_argument("--kernel", type=Path, default=PEER_KERNEL)
    rn.add_argument("--table", default=TABLE, help="the microbench.csv whose baseline picks are "
                    "timed (baseline_tile; '<model>+shared' points: their shared experts' "
                    "schedule too, e.g. reports/measured/h200/microbench_shared.csv)")
    rn.add_argument("--rounds", type=ROUNDS, default=2, help="interleaved rounds (the best kept)")
    rn.add_argument("--replays", type=int_range(1, 10**4), default=50,
                    help="graph replays per timing (at most 10^4)")
    rn.add_argument("--tiny", action="store_true", help="CPU smoke test: a small layer shape")
    rn.add_argument("--weight-dtype", type=_precisions, default=("bf16",),
                    help="comma-separated weight precisions: bf16, fp8 (block-scaled FP8 "
                    "weights, ours weight-only), fp8-w8a8 (ours with activations quantised per "
                    "group); vLLM runs its FP8 block path beside both FP8 ones")
    p.set_defaults(func=_peer)


def _outputs(out: Path, *names: str) -> None:
    """Before any work: each output OUT/NAME absent or written by deamoe (deamoe.io)."""
    from deamoe.io import check_outputs

    check_outputs(files=[Path(out) / name for name in names], folders=[out])


def _picks(table: str) -> None:
    """--table: a microbench.csv whose picks the tool runs, checked before any GPU work."""
    from deamoe.decode.picks import TilePicks

    TilePicks.from_table(table)


def _train(args) -> int:
    from deamoe.bench.train_bench import PARTS, PATHS, bench_train, choices
    from deamoe.settings import load_settings

    parts = choices("--parts", args.parts, PARTS)
    paths = choices("--paths", args.paths, tuple(PATHS))
    settings = load_settings(args.config)  # a bad config is named before the GPU check
    _outputs(args.out, "train_fsdp_throughput.csv" if "fsdp" in parts else "train_throughput.csv",
             *(["train_layer_kernels.csv"] if "kernels" in parts else []))
    _needs_cuda("train")
    return bench_train(args.out, settings, parts, paths, args.tokens, args.steps)


def _needs_cuda(what: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"bench {what}: needs a CUDA GPU")


def _picks_check(args) -> int:
    _picks(args.table)
    _outputs(args.out, "picks_check.csv")
    _needs_cuda("picks-check")
    from deamoe.bench.checks import picks_check

    return picks_check(args.out, args.table, every=args.all)


def _stream_check(args) -> int:
    _outputs(args.out, "stream_check.csv")
    _needs_cuda("stream-check")
    from deamoe.bench.checks import stream_check

    return stream_check(args.out)


def _fp8_check(args) -> int:
    if "bf16" in args.weight_dtype:
        raise ConfigError("--weight-dtype: bf16 is checked by the battery and stream-check; "
                          "give fp8 and/or fp8-w8a8")
    # A file given must load (a mistyped path is no default left unextracted); the default
    # absent: that part is not run, and says so
    kernel = args.kernel or PEER_KERNEL
    if args.kernel is not None or kernel.is_file():
        from deamoe.bench.vllm_peer import load_peer

        load_peer(kernel)
    _outputs(args.out, "fp8_check.csv")
    _needs_cuda("fp8-check")
    from deamoe.bench.checks import fp8_check

    return fp8_check(args.out, args.weight_dtype, args.models, kernel)


def _routing_check(args) -> int:
    _outputs(args.out, "routing_check.csv", "routing_time.csv")
    _needs_cuda("routing-check")
    from deamoe.bench.checks import routing_check

    return routing_check(args.out)


def _smem_check(args) -> int:
    import dataclasses

    from deamoe.bench.settings import MicrobenchSettings, check_tile_names
    from deamoe.bench.smem import GEMMS, smem_check
    # --tiles for every precision asked for: named by the flag where one is no tile, or FP8
    # weights (or, a '-pq' one, bf16 weights) cannot take it
    s = MicrobenchSettings(weight_dtype=list(args.weight_dtype))
    if args.tiles:
        bf16 = "bf16" in args.weight_dtype
        fmts = [f for f in map(s.fp8_format, args.weight_dtype) if f is not None]
        check_tile_names(args.tiles, "--tiles", bf16=bf16, fmts=fmts, to_fp8="give --weight-dtype fp8-w8a8")
        s = dataclasses.replace(s, fp8_tiles=list(args.tiles), **({"tiles": list(args.tiles)} if bf16 else {}))
    if set(args.gemms) - set(GEMMS):
        raise ConfigError(f"--gemms: {', '.join(sorted(set(args.gemms) - set(GEMMS)))} not among "
                          f"{', '.join(GEMMS)}")
    _outputs(args.out, "smem_check.csv")
    _needs_cuda("smem-check")
    return smem_check(args.out, s, args.gemms)


def _variants(args) -> int:
    from deamoe.bench.tools import parse_variants, variants
    from deamoe.bench.variant_checks import check_variants
    from deamoe.bench.vllm_peer_run import checked_points

    sets, points = parse_variants(args.items)
    if len(args.weight_dtype) != 1:
        raise ConfigError(f"bench variants: --weight-dtype takes one precision, got "
                          f"{','.join(args.weight_dtype)}")
    precision = args.weight_dtype[0]
    _picks(args.table)
    notes = check_variants(sets, checked_points(points, args.table, precision), precision, args.table)
    _outputs(args.out, "variants.csv")
    for note in notes:  # bf16 picks fitted to FP8 weights: what runs, said before the run
        print(note)
    _needs_cuda("variants")
    return variants(args.out, sets, points, args.table, args.rounds, precision)


def _trace(args) -> int:
    import pandas as pd

    _picks(args.table)
    mb = pd.read_csv(args.table)  # checked by _picks: a microbench.csv
    if not (mb.model.isin(args.models) & mb.batch.isin(args.batches)).any():
        raise ConfigError(f"bench trace: {args.table} has no row of --models "
                          f"{','.join(args.models)} at --batches "
                          f"{','.join(map(str, args.batches))}; nothing to trace")
    _outputs(args.out, "trace.csv")
    _needs_cuda("trace")
    from deamoe.bench.tools import trace

    return trace(args.out, args.table, args.models, args.batches, args.copies)


def _read_sizes(args) -> int:
    _outputs(args.out, "read_sizes.csv")
    _needs_cuda("read-sizes")
    from deamoe.bench.tools import read_sizes

    return read_sizes(args.out)


def _overread(args) -> int:
    from deamoe.bench.tools import overread

    _outputs(args.out, "dense_overread.csv")
    return overread(args.out, args.draws)


def _import(args) -> int:
    from deamoe.bench.tools import import_tables

    return import_tables(args.dirs, args.dest, args.sha, args.merge)


def _peer(args) -> int:
    from deamoe.bench import vllm_peer

    if args.step == "extract":
        vllm_peer.extract(args.to)
        return 0
    if args.step == "check":  # bf16, then the FP8 block path beside ours (vllm_peer_fp8)
        from deamoe.bench.vllm_peer_fp8 import check_fp8

        return vllm_peer.check(args.kernel) | check_fp8(args.kernel)
    from deamoe.bench.vllm_peer_run import run_peer

    # --tiny measures no roofline: OUT/roofline.json, the user's or not, is left as it is
    _outputs(args.out, "vllm_peer.csv", *(() if args.tiny else ("roofline.json",)))
    return run_peer(args.kernel, args.points, args.out, args.table, args.rounds, args.replays,
                    args.tiny, precisions=args.weight_dtype)


def _check_merge_target(into: Path, out: Path, skip: set[str]) -> None:
    """--merge-decode-into's problems, before any GPU work: nothing to merge, the run's own
    table, or a file that is no decode_tpot table."""
    from deamoe.io import check_output_file

    if "decode" in skip:
        raise ConfigError("--merge-decode-into: the decode part is skipped (--skip decode)")
    if into.resolve() == (out / "decode_tpot.csv").resolve():
        raise ConfigError(f"--merge-decode-into: {into} is this run's own decode_tpot.csv; "
                          "name another table (e.g. a copy of the committed one)")
    if into.is_dir():
        raise ConfigError(f"--merge-decode-into: {into} is a folder; name a decode_tpot.csv table")
    check_output_file(into, replace_committed=True)  # a link, or a file where its folder goes
    if into.exists():
        from deamoe.bench.decode import read_tpot

        read_tpot(into)


def cmd_microbench(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from deamoe.bench.settings import MicrobenchSettings
    from deamoe.io import write_json
    from deamoe.provenance import provenance
    from deamoe.settings import load_section

    s = load_section(args.config, "microbench", MicrobenchSettings)
    if args.models:
        s = dataclasses.replace(s, models=args.models)
    if args.batches:
        s = dataclasses.replace(s, batches=args.batches)
    if args.weight_dtype:
        s = MicrobenchSettings(**{**dataclasses.asdict(s), "weight_dtype": list(args.weight_dtype)})
    skip = set(args.skip)
    unknown = skip - {"battery", "roofline", "layers", "torch", "decode", "vllm_peer"}
    if unknown:
        raise ConfigError(f"--skip: unknown part(s) {', '.join(sorted(unknown))}")
    tiles_from = Path(args.tiles_from) if args.tiles_from else None
    if tiles_from is not None and not tiles_from.is_file():
        raise ConfigError(f"--tiles-from: {tiles_from} is a folder; give the microbench.csv in it"
                          if tiles_from.is_dir() else f"--tiles-from: {tiles_from}: {not_a_file(tiles_from)}")
    if tiles_from is not None:  # its picks, read by the decode benchmark after the layers
        _picks(tiles_from)
    out = Path(args.out)
    if args.merge_decode_into:
        _check_merge_target(Path(args.merge_decode_into), out, skip)
    from deamoe.io import check_outputs, folder_lock

    check_outputs(files=[out / name for name in MICROBENCH_OUTPUTS], folders=[out])
    with folder_lock(out, what="another `python -m deamoe microbench`"):
        if not torch.cuda.is_available():
            write_json(out / "status.json", {"status": "not run", "reason": "no CUDA GPU",
                                             **provenance("cpu")})
            print(f"no CUDA GPU: wrote {out / 'status.json'}; the report uses the committed tables")
            return 0
        return _microbench(s, out, skip, tiles_from, args.merge_decode_into)


def _microbench(s, out: Path, skip: set[str], tiles_from, merge_into) -> int:
    import torch

    if "decode" not in skip and s.decode:  # a decoder too large for the GPU: before any work
        from deamoe.bench.decode import DecoderShape, check_decode_fits

        check_decode_fits(s.decode_models, s.decode_batches, DecoderShape.of(s),
                          torch.cuda.mem_get_info()[1])
    from deamoe.bench.run import run_all

    rc = run_all(s, out, skip, tiles_from)
    if merge_into and (out / "decode_tpot.csv").exists():
        from deamoe.bench.decode import merge_tpot

        n = merge_tpot(out / "decode_tpot.csv", merge_into)
        print(f"merged {out / 'decode_tpot.csv'} into {merge_into} ({n} rows)")
    return rc
