"""GPU correctness checks beside the microbenchmark's battery (`python -m deamoe bench ...`).

  picks_check     each committed pick (tiles, BLOCK_M, stream schedule) at its own batch on its
                  model's Table 1 layer: eagerly as a battery case (bf16 against the float32
                  reference, buffers poisoned) and captured in a CUDA graph, replayed twice with
                  the output poisoned before each replay, against the eager step on default tiles
  stream_check    the battery's small shapes and three Table 1 shapes with every stream option
                  of both layers (split_launches; DeaMoE's dense_dept_up alone, in parts, with
                  its own BLOCK_M, with dense_parts), then the graph-captured step likewise
  routing_check   the routing kernel against deamoe.routing.route on every Table 1 shape
                  (baseline top-k, DeaMoE soft and strict), bias off/on, 1..256 tokens, fp32
                  (same sets, weights within 1e-5) and bf16 logits (equal up to exact ties),
                  and its time against the eager torch routing, each alone in a CUDA graph
  fp8_check       block-scaled FP8 weights (deamoe.kernels.fp8), per precision: the battery
                  (small shapes and the Table 1 layers) against the dequantised reference, the
                  stream options of both layers (w8a8 also on '-pq' tiles, the activations
                  quantised before each GEMM, and on '-qo' ones, the up-projections' output
                  stored quantised for the GEMM after them, in 128- and in 64-column groups:
                  battery.W8A8_PASSES), the step in CUDA graphs, and --
                  with vLLM's kernel file -- vLLM's FP8 block path beside ours on the same
                  Table 1 inputs
Each writes a CSV under OUT (every row stamped with the gpu, torch, triton, date and git_sha it
came from), prints `ok/total` and the failing rows, and returns exit status 1 if any case
fails.  CUDA only.
"""

from __future__ import annotations

from pathlib import Path

import torch

PLOTTED = ("Baseline-7B", "Qwen3-235B-A22B", "DeepSeek-V3")
STREAM_OPTIONS = {
    "moe": [{"split_launches": 2}, {"split_launches": 4}],
    "deamoe": [{"split_launches": 2}, {"split_launches": 4}, {"dense_dept_up": True},
               {"dense_dept_up": True, "split_launches": 2},
               {"dense_dept_up": True, "dense_block_m": 64},
               {"dense_dept_up": True, "split_launches": 2, "dense_parts": 1}]}
# w8a8 FP8 only: the dense department GEMM through cuBLAS (kernels.fp8_dense_up), on the
# passes whose expert up-projection reads the department output as written (plain rows)
CUBLAS_OPTIONS = ({"dense_dept_up": True, "dense_up_cublas": True},
                  {"dense_dept_up": True, "dense_up_cublas": True, "split_launches": 2})
CUBLAS_PASSES = ("", "-pq")
GRAPH_OPTIONS = ({"dense_dept_up": True}, {"dense_dept_up": True, "split_launches": 2},
                 {"dense_dept_up": True, "split_launches": 4, "dense_parts": 1},
                 {"dense_dept_up": True, "split_launches": 4, "dense_parts": 3})


def stamped(rows: list[dict]):
    """The rows as a table, each stamped with where it was measured (a check table read later
    names its chip, library versions and commit like every measured table)."""
    import pandas as pd
    import triton

    from deamoe.provenance import provenance

    prov = provenance("cuda")
    return pd.DataFrame(rows).assign(gpu=prov["device"], torch=prov["torch"],
                                     triton=triton.__version__, date=prov["date"],
                                     git_sha=prov["git_sha"])


def _finish(rows: list[dict], path: Path, what: str) -> int:
    from deamoe.io import write_csv

    df = stamped(rows)
    write_csv(path, df)
    print(f"{what}: {int(df.ok.sum())}/{len(df)} ok, max rel err {df.rel_err.max():.2e}")
    if not df.ok.all():
        print(df[~df.ok].to_string(index=False))
    return 0 if bool(df.ok.all()) else 1


def _partial(rows: list[dict], path: Path, what: str) -> None:
    """The rows so far to `path` (a call stopped at its time limit keeps them) and one line;
    nothing while there are none."""
    from deamoe.io import write_csv

    if not rows:
        return
    df = stamped(rows)
    write_csv(path, df)
    print(f"{what}: {int(df.ok.sum())}/{len(df)} ok so far, max rel err {df.rel_err.max():.2e}",
          flush=True)


def _graph_rows(shape, tiles_list, batches, seed: int, case: str, fp8=None,
                device="cuda") -> list[dict]:
    """For each (tiles, batch): the step captured in a CUDA graph, replayed twice, against the
    eager step on default tiles (same weights and input); fp8: on FP8 weights of that format,
    every tile fitted to it, within the battery's tolerance for it (w8a8: a last-bit change of
    an atomically summed input may move its e4m3 rounding)."""
    from deamoe.bench.layer_step import graph_replay_rows
    from deamoe.decode.step import ffn_step
    from deamoe.decode.weights import random_weights
    from deamoe.kernels.battery import tolerance
    from deamoe.kernels.fp8 import fit_tiles

    default = fit_tiles(type(tiles_list[0])(), fp8)
    tiles_list = [fit_tiles(t, fp8) for t in tiles_list]
    w = random_weights(shape, device, seed=seed, fp8=fp8)
    rows = []
    for tiles, batch in zip(tiles_list, batches):
        x = torch.randn(batch, shape.h, device=device, dtype=torch.bfloat16)
        ref = ffn_step(shape, w, x, tiles=default).float()
        rows += graph_replay_rows(shape, w, x, tiles, ref, replays=2, case=case,
                                  tol=tolerance("cuda", torch.bfloat16, fp8))
    del w
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def picks_check(out: Path, table: str, every: bool = False, device="cuda") -> int:
    """The committed picks with a stream schedule (dense_parts or split_launches) or the dense
    department GEMM through cuBLAS (every pick of both layers with `every`) ->
    out/picks_check.csv.  A table of FP8 picks (microbench_fp8.csv: its weight_dtype column) is
    checked on weights of that format."""
    import pandas as pd

    from deamoe.decode.knobs import make_tiles, parse_knobs
    from deamoe.kernels.fp8 import Fp8Format
    from deamoe.shapes import table1_row
    from deamoe.kernels.battery import Case, build_layer, check_case

    picks = pd.read_csv(table)
    if "weight_dtype" not in picks:
        picks = picks.assign(weight_dtype="bf16")
    rows = []
    for (model, precision), group in picks.groupby(["model", "weight_dtype"], sort=False):
        fmt = Fp8Format.of(precision)
        for kind, col in (("baseline", "baseline_tile"), ("deamoe", "deamoe_tile")):
            chosen = group if every else group[group[col].str.contains(
                "dense_parts=|split_|dense_up_cublas=1")]
            if chosen.empty:
                continue
            shape = getattr(table1_row(model), kind)
            tiles = [make_tiles(shape, parse_knobs(k)) for k in chosen[col]]
            batches = [int(b) for b in chosen.batch]
            layer = build_layer(shape, device, seed=11, dtype=torch.bfloat16)
            for t, batch, knobs in zip(tiles, batches, chosen[col]):
                r = check_case(Case(model, shape, batch, "random", seed=batch), device,
                               torch.bfloat16, layer=layer, tiles=t, fp8=fmt)
                rows.append({**r, "kind": kind, "batch": batch, "path": "eager", "knobs": knobs})
            del layer
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            graph = _graph_rows(shape, tiles, batches, 5, model, fmt, device)
            rows += [{**g, "kind": kind, "batch": b, "path": "graph", "knobs": k}
                     for g, b, k in zip(graph, [b for b in batches for _ in (0, 1)],
                                        [k for k in chosen[col] for _ in (0, 1)])]
            print(f"{model} {kind} ({precision}): {len(chosen)} picks checked", flush=True)
    return _finish(rows, Path(out) / "picks_check.csv", "committed picks")


def stream_check(out: Path) -> int:
    """Every stream option of both layers -> out/stream_check.csv."""
    from deamoe.shapes import table1_row
    from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles

    def tiles(shape, option):
        return (DeaMoETiles if shape.kind == "deamoe" else MoETiles)(**option)

    def label(option):
        return ";".join(f"{k}={int(v)}" for k, v in option.items())

    rows = []
    for name, shape in small_shapes().items():
        for option in STREAM_OPTIONS[shape.kind]:
            for seed, tokens in enumerate((1, 37, 256)):
                for pattern in PATTERNS:
                    r = check_case(Case(name, shape, tokens, pattern, seed), "cuda",
                                   torch.bfloat16, tiles=tiles(shape, option))
                    rows.append({**r, "variant": label(option)})
    for model in PLOTTED:
        for shape in (table1_row(model).baseline, table1_row(model).deamoe):
            layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
            for option in STREAM_OPTIONS[shape.kind]:
                for case in (Case(model, shape, 13, "random", 33),
                             Case(model, shape, 64, "empty", 2)):
                    r = check_case(case, "cuda", torch.bfloat16, layer=layer,
                                   tiles=tiles(shape, option))
                    rows.append({**r, "variant": label(option)})
            del layer
            torch.cuda.empty_cache()
    for model in PLOTTED:  # router + routing beside the dense department GEMM, in a graph
        shape = table1_row(model).deamoe
        options = [o for o in GRAPH_OPTIONS for _ in (4, 64)]
        graph = _graph_rows(shape, [DeaMoETiles(**o) for o in options],
                            [b for _ in GRAPH_OPTIONS for b in (4, 64)], 5, f"{model} graph")
        rows += [{**g, "variant": label(o) + ";graph"}
                 for g, o in zip(graph, [o for o in options for _ in (0, 1)])]
    return _finish(rows, Path(out) / "stream_check.csv", "stream options")


def fp8_check(out: Path, precisions, models, kernel: Path | None = None,
              device="cuda") -> int:
    """FP8 weights in each of `precisions`, on the Table 1 `models` (module doc) ->
    out/fp8_check.csv, written after each battery pass and each model's stream and graph rows
    too (a call stopped at its time limit keeps every finished part)."""
    from deamoe.kernels.battery import (W8A8_PASSES, Case, build_layer, check_case, full_battery,
                                        pass_tiles, takes_pass)
    from deamoe.kernels import fp8_dense_up
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fp8 import Fp8Format
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.shapes import table1_row

    rows = []
    for precision in precisions:
        fmt = Fp8Format.of(precision)
        # w8a8 once per way its activations meet the GEMMs (battery.W8A8_PASSES)
        passes = W8A8_PASSES if fmt.activations == "fp8" else ("",)
        for how in passes:
            rows += [{**r, "part": "battery" + how} for r in
                     full_battery(device, torch.bfloat16, [1, 13, 64, 256], models, fp8=fmt,
                                  w8a8_pass=how)]
            _partial(rows, Path(out) / "fp8_check.csv", f"{precision} battery{how}")
        for model in models:
            for shape in (table1_row(model).baseline, table1_row(model).deamoe):
                layer = build_layer(shape, device, seed=11, dtype=torch.bfloat16)
                cls = DeaMoETiles if shape.kind == "deamoe" else MoETiles
                for how in (p for p in passes if takes_pass(shape, p, fmt)):
                    cublas = (shape.kind == "deamoe" and how in CUBLAS_PASSES and device == "cuda"
                              and fp8_dense_up.format_misfit(shape.h, shape.h_ffn, fmt) is None)
                    for option in STREAM_OPTIONS[shape.kind] + list(CUBLAS_OPTIONS) * cublas:
                        tiles = pass_tiles(cls(**option), shape, how, fmt)
                        r = check_case(Case(model, shape, 13, "random", 33), device, torch.bfloat16,
                                       layer=layer, tiles=tiles, fp8=fmt)
                        rows.append({**r, "part": "stream" + how, "variant": str(option)})
                del layer
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            deamoe = table1_row(model).deamoe
            cublas = device == "cuda" and fp8_dense_up.format_misfit(deamoe.h, deamoe.h_ffn, fmt) is None
            graphed = GRAPH_OPTIONS[:2] + CUBLAS_OPTIONS[:1] * cublas
            options = [o for o in graphed for _ in (4, 64)]
            graph = _graph_rows(table1_row(model).deamoe, [DeaMoETiles(**o) for o in options],
                                [b for _ in graphed for b in (4, 64)], 5,
                                f"{model} graph", fmt, device)
            rows += [{**g, "part": "graph", "weights": precision, "variant": str(o)}
                     for g, o in zip(graph, [o for o in options for _ in (0, 1)])]
            _partial(rows, Path(out) / "fp8_check.csv", f"{precision} {model}")
    if kernel is not None and Path(kernel).is_file():  # vLLM's FP8 block path beside ours
        from deamoe.bench.vllm_peer_fp8 import fp8_check_rows

        cases = [(table1_row(m).baseline, b) for m in models for b in (4, 64)]
        rows += [{**r, "part": "vllm", "case": f"{r['impl']} h={r['h']}", "kind": "moe",
                  "tokens": r["batch"], "weights": r["impl"]}
                 for r in fp8_check_rows(kernel, Fp8Format(), cases, torch.bfloat16)]
    else:
        print(f"vLLM beside ours: not run (no kernel file {kernel}; `bench peer extract`)")
    return _finish(rows, Path(out) / "fp8_check.csv", "fp8 check")


def routing_check(out: Path) -> int:
    """The routing kernel against deamoe.routing.route -> out/routing_check.csv, and its time
    against the eager torch routing -> out/routing_time.csv."""
    import pandas as pd

    from deamoe.bench.layer_step import time_fn
    from deamoe.shapes import TABLE1
    from deamoe.io import write_csv
    from deamoe.kernels.routing_topk import compare_with_reference, route_kernel
    from deamoe.routing import route

    rows, times = [], []
    for model, row in TABLE1.items():
        shapes = [("baseline", row.baseline), ("deamoe", row.deamoe),
                  ("deamoe-strict", row.deamoe.replace(dept_topk="strict"))]
        for kind, shape in shapes:
            g = torch.Generator(device="cuda").manual_seed(len(rows))
            for with_bias in (False, True):
                bias = (0.02 * torch.randn(shape.n_expert, generator=g, device="cuda")
                        if with_bias else None)
                for T in (1, 4, 13, 64, 128, 256):
                    logits = 2 * torch.randn(T, shape.n_expert, generator=g, device="cuda")
                    for dtype in (torch.float32, torch.bfloat16):
                        r = compare_with_reference(shape, logits.to(dtype), bias)
                        exact = r["same_sets"] and r["max_w_err"] < 1e-5
                        ok = r["ranked"] and r["distinct_ids"] and (
                            exact if dtype == torch.float32 else r["tie_only"])
                        rows.append({"model": model, "kind": kind, "bias": with_bias,
                                     "dtype": str(dtype).split(".")[-1], **r, "ok": ok,
                                     "rel_err": r["max_w_err"]})
            if kind == "deamoe-strict":
                continue
            for T in (4, 16, 64, 128):
                logits = torch.randn(T, shape.n_expert, device="cuda", dtype=torch.bfloat16)
                for impl, fn in (("triton", route_kernel), ("torch eager", route)):
                    t = time_fn(lambda: fn(shape, logits), 100)
                    times.append({"model": model, "kind": kind, "tokens": T, "impl": impl,
                                  "us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us})
    tf = stamped(times)
    write_csv(Path(out) / "routing_time.csv", tf)
    print(tf.pivot_table(index=["model", "kind", "tokens"], columns="impl",
                         values="us").round(1).to_string())
    return _finish(rows, Path(out) / "routing_check.csv", "routing check")
