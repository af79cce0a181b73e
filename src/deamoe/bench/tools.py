"""A/B, timeline and table tools of the decode kernels (`python -m deamoe bench ...`).

  variants       knob sets timed on the committed picks: for each point the baseline layer on
                 its committed knobs (twice: its spread is the noise) and on each `moe/` variant,
                 the DeaMoE layer on its committed knobs and on each other variant (the committed
                 knobs updated with the variant's), same routings and weight copies, every set
                 timed `rounds` times interleaved, on a graph of >= min_layers_per_graph layer
                 steps as in the microbenchmark -> variants.csv (us = the best round)
  trace          the picked layers in their CUDA graph under torch.profiler: every kernel's
                 stream, start, duration and the idle gap before it (no kernel of any stream
                 running) -> trace.csv; where a layer's time goes between and beside launches
  read_sizes     the streaming-read kernel over buffers of 12.5 MiB - 4 GiB (>= 2 GB per replay,
                 one launch per buffer, graph-timed): what one launch of N bytes can reach, the
                 bound under any GEMM of that size -> read_sizes.csv (the report cites it)
  overread       CPU: at 4 / 8 / 16 tokens, the mean distinct departments over random routings
                 of iid N(0, 1) logits and the bytes the dense department GEMM (dense_dept_up)
                 streams beyond them -> dense_overread.csv
  import_tables  a device run's microbench / decode_tpot tables into the committed folder
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import torch


RESERVED = ("committed", "committed again")  # the rows `variants` times the table's picks as


def parse_variants(items: list[str]) -> tuple[dict, list[str]]:
    """'[moe/]NAME:KNOB=VALUE[,...]' items -> ({'moe': {name: knobs}, 'deamoe': {...}}, the
    'MODEL:BATCH' items)."""
    import dataclasses

    from deamoe.errors import ConfigError
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles

    knobs = {"moe": {f.name for f in dataclasses.fields(MoETiles)},
             "deamoe": {f.name for f in dataclasses.fields(DeaMoETiles)}}
    sets, points = {"moe": {}, "deamoe": {}}, []
    for item in items:
        if "=" not in item:
            points.append(item)
            continue
        name, sep, spec = item.partition(":")
        parts = [part.partition("=") for part in spec.split(",")]
        if not sep or not name or any(not k or not eq or not v for k, eq, v in parts):
            raise ConfigError(f"variant {item!r}: expected [moe/]NAME:KNOB=VALUE[,KNOB=VALUE...]")
        keys = [k for k, _, _ in parts]
        twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if twice is not None:  # the dict below would keep its last value without a word
            raise ConfigError(f"variant {item!r}: {twice!r} is given twice; give each knob once")
        kind = "moe" if name.startswith("moe/") else "deamoe"
        if name.removeprefix("moe/") in RESERVED or name in sets[kind]:
            why = ("is given twice" if name in sets[kind] else "is the committed picks' row")
            raise ConfigError(f"variant {item!r}: the name {name!r} {why}; give each variant "
                              "its own name")
        unknown = [k for k, _, _ in parts if k not in knobs[kind]]
        if unknown:
            raise ConfigError(f"variant {item!r}: {unknown[0]!r} is no knob of the {kind} layer "
                              f"(one of {', '.join(sorted(knobs[kind]))})")
        sets[kind][name] = {k: int(v) if v.isdigit() else v for k, _, v in parts}
    if not points:
        raise ConfigError("bench variants: no MODEL:BATCH point given (e.g. DeepSeek-V3:16)")
    return sets, points


def apply_variant(knobs: dict, variant: dict) -> dict:
    """The committed knobs updated with a variant's; a value '+sfx' appends '-sfx' to the
    committed tile of that knob, or sets the flags and counts it names (with_flags)."""
    return {**knobs, **{k: with_flags(knobs[k], v[1:]) if isinstance(v, str) and v.startswith("+")
                        else v for k, v in variant.items()}}


def with_flags(tile: str, sfx: str) -> str:
    """`tile`-`sfx`; where that is no tile name but `sfx` names tile flags ('qs', 'pq-qs') or
    counts ('s3', 'k64': a letter of the tile name and a number), `tile` with those flags set
    and counts replaced, each in its place: '+qs' on 'n64-k128-w4-s4-pq-nf' gives
    'n64-k128-w4-s4-pq-qs-nf', '+s3' gives 'n64-k128-w4-s3-pq-nf' (a variant over points
    whose picks differ but in what it changes).  Otherwise (or where nothing changes) the
    appended text, for make_tiles to refuse."""
    import dataclasses

    from deamoe.kernels.tile_config import COUNT_FIELDS, TileConfig

    name = f"{tile}-{sfx}"
    try:
        return TileConfig.parse(name).name
    except ValueError:
        pass
    words = sfx.split("-")
    counted = [w for w in words if w[:1] in COUNT_FIELDS and w[1:].isdigit()]
    counts = {COUNT_FIELDS[w[0]]: int(w[1:]) for w in counted}
    if len(counts) != len(counted):  # one count given twice ('s3-s5'): no variant
        return name
    try:
        base = TileConfig.parse(tile)
        flags = TileConfig.parse("-".join(["n16-k16-w1-s1",
                                           *(w for w in words if w not in counted)]))
    except ValueError:
        return name
    on = {f.name: True for f in dataclasses.fields(TileConfig) if getattr(flags, f.name) is True}
    changed = dataclasses.replace(base, **on, **counts).name
    return name if changed == tile else changed  # flags it has already: no variant, refused


def variants(out: Path, sets: dict, points: list[str], table: str, rounds: int = 2,
             precision: str = "bf16") -> int:
    """Each knob set against the table's picks of `precision` (FP8: on weights of that format)
    at each point, interleaved rounds -> out/variants.csv."""
    import pandas as pd

    from deamoe.bench.checks import stamped
    from deamoe.bench.microbench import committed_points, time_knob_sets
    from deamoe.bench.settings import MicrobenchSettings
    from deamoe.io import write_csv

    s = MicrobenchSettings()
    rows = []
    for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(
            points, s, table, fp8=s.fp8_format(precision)):
        runs_of = {"committed": knobs}
        if shape.kind == "moe":
            runs_of["committed again"] = knobs
        runs_of.update({n: apply_variant(knobs, v) for n, v in sets[shape.kind].items()})
        runs = time_knob_sets(shape, weights, inputs, runs_of, s, rounds=rounds,
                              label=f"{model} {batch}")
        for name, r in runs.items():
            rows.append({"model": model, "kind": shape.kind, "batch": batch, "bytes": nbytes,
                         "variant": name, "us": min(r), "runs": r, "weight_dtype": precision})
            print(f"{model:16s} {shape.kind:6s} {batch:4d} {name:18s} {min(r):8.1f} us",
                  flush=True)
        # every row says where it was timed, like the committed tables made from it
        write_csv(Path(out) / "variants.csv", stamped(rows))
    df = pd.DataFrame(rows)
    base = df[(df.kind == "moe") & (df.variant == "committed")].set_index(["model", "batch"])
    dea = df[df.kind == "deamoe"].copy()
    base_us = [base.loc[(m, b), "us"] for m, b in zip(dea.model, dea.batch)]
    base_bytes = [base.loc[(m, b), "bytes"] for m, b in zip(dea.model, dea.batch)]
    dea["speedup"] = [u0 / u for u0, u in zip(base_us, dea.us)]
    dea["sp_over_ideal"] = [sp * by / b0 for sp, by, b0 in zip(dea.speedup, dea.bytes, base_bytes)]
    for values, digits in (("us", 1), ("sp_over_ideal", 4), ("speedup", 4)):
        print(dea.pivot_table(index=["model", "batch"], columns="variant",
                              values=values).round(digits).to_string())
    print(df[df.kind == "moe"].pivot_table(index=["model", "batch"], columns="variant",
                                           values="us").round(1).to_string())
    return 0


def _profile_graph(run, out: Path) -> list[dict]:
    """Kernel events of the last of 5 profiled replays of `run` captured in a CUDA graph (its
    trace exported into a private staging folder beside out/trace.csv)."""
    from deamoe.io import staging_dir

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    with staging_dir(out / "trace.csv") as stage:
        prof.export_chrome_trace(str(stage / "trace.json"))
        ev = sorted((e for e in json.loads((stage / "trace.json").read_text())["traceEvents"]
                     if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    return ev[-(len(ev) // 5):] if ev else []


def trace(out: Path, table: str, models: list[str], batches: list[int],
          copies: int | None = None) -> int:
    """The kernel timeline of the table's picks -> out/trace.csv; a table with a weight_dtype
    column (microbench_fp8.csv) is traced on weights of each of its precisions."""
    import pandas as pd

    from deamoe.decode.knobs import make_tiles, parse_knobs
    from deamoe.decode.step import ffn_step
    from deamoe.decode.weights import random_weights
    from deamoe.kernels.fp8 import Fp8Format
    from deamoe.shapes import table1_row
    from deamoe.io import write_csv

    out = Path(out)
    mb = pd.read_csv(table)
    if "weight_dtype" not in mb:
        mb = mb.assign(weight_dtype="bf16")
    rows = []
    for model in models:
        # the big models' single layer per graph shows first-in-graph effects; 4 copies of the
        # 7B layer show the steady state
        n = copies or (4 if model == "Baseline-7B" else 1)
        # only the precisions with a pick at these batches: each needs its own layer weights
        for precision in mb[(mb.model == model) & mb.batch.isin(batches)].weight_dtype.unique():
            for kind, shape in (("baseline", table1_row(model).baseline),
                                ("deamoe", table1_row(model).deamoe)):
                ws = [random_weights(shape, "cuda", seed=c, fp8=Fp8Format.of(precision))
                      for c in range(n)]
                for T in batches:
                    sel = mb[(mb.model == model) & (mb.batch == T) & (mb.weight_dtype == precision)]
                    if sel.empty:
                        continue
                    tiles = make_tiles(shape, parse_knobs(sel.iloc[0][f"{kind}_tile"]))
                    xs = [torch.randn(T, shape.h, device="cuda", dtype=torch.bfloat16) for _ in ws]

                    def run():
                        for w, x in zip(ws, xs):
                            ffn_step(shape, w, x, tiles=tiles)
                    label = f"{model} {kind} {precision} T={T}"
                    rows += _timeline(_profile_graph(run, out), n, label,
                                      {"model": model, "kind": kind, "weight_dtype": precision,
                                       "batch": T})
                write_csv(out / "trace.csv", pd.DataFrame(rows))
                del ws
                torch.cuda.empty_cache()
    return 0


def _timeline(ev: list[dict], copies: int, label: str, key: dict) -> list[dict]:
    """Rows of one traced layer (each kernel's stream, start, duration and the idle gap before
    it, streams overlapping), its summary printed."""
    if not ev:
        print(f"{label}: no kernel events in the trace", flush=True)
        return []
    rows, end, idle = [], None, 0.0  # end: of the kernels so far
    for i, e in enumerate(ev):
        gap = 0.0 if end is None else max(0.0, e["ts"] - end)
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
        idle += gap
        rows.append({**key, "i": i, "kernel": e["name"][:60], "stream": e.get("tid"),
                     "start_us": e["ts"] - ev[0]["ts"], "dur_us": e["dur"],
                     "gap_before_us": gap})
    span = max(e["ts"] + e["dur"] for e in ev) - ev[0]["ts"]
    print(f"{label}: {len(ev)} kernels on {len({e.get('tid') for e in ev})} streams over "
          f"{copies} copies, span {span / copies:.1f} us/layer, kernel time "
          f"{sum(e['dur'] for e in ev) / copies:.1f}, idle {idle / copies:.1f}", flush=True)
    return rows


def read_sizes(out: Path) -> int:
    import pandas as pd
    import triton

    from deamoe.bench.layer_step import time_fn
    from deamoe.io import write_csv
    from deamoe.kernels.stream_read import stream_read
    from deamoe.kernels.stream_read_benchmark import VARIANTS
    from deamoe.provenance import provenance

    rows = []
    for mb in (12.5, 25, 50, 100, 200, 400, 800, 1600, 4096):
        n = int(mb * 2**20) // 2
        copies = max(1, math.ceil(2.0e9 / (2 * n)))
        bufs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for block, unroll, warps in VARIANTS:
            def run():
                for b in bufs:
                    stream_read(b, block, unroll, warps)
            us = time_fn(run, 30, copies).median_us
            rows.append({"mb": mb, "bytes": 2 * n, "block": block, "unroll": unroll,
                         "num_warps": warps, "copies": copies, "us": us,
                         "tbps": 2 * n / us / 1e6})
        best = max((r for r in rows if r["mb"] == mb), key=lambda r: r["tbps"])
        print(f"{mb:7.1f} MB x{copies:3d}: best {best['us']:9.1f} us  {best['tbps']:.3f} TB/s",
              flush=True)
        del bufs
        torch.cuda.empty_cache()
    prov = provenance("cuda")
    write_csv(Path(out) / "read_sizes.csv", pd.DataFrame(rows).assign(
        gpu=prov["device"], torch=prov["torch"], triton=triton.__version__, date=prov["date"],
        git_sha=prov["git_sha"]))
    return 0


def overread(out: Path, draws: int = 2000) -> int:
    import pandas as pd

    from deamoe.analysis.budget import loaded_expert_params
    from deamoe.bench.layer_step import step_bytes
    from deamoe.shapes import table1_row
    from deamoe.io import write_csv
    from deamoe.routing import route

    rows = []
    for model in ("Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B"):
        shape = table1_row(model).deamoe
        # the dense GEMM streams a department's gate and up: 2 of its backbone's 3 matrices
        dept_up_bytes = 2 * loaded_expert_params(shape, 0, 1) * 2 // 3
        gen = torch.Generator().manual_seed(0)
        for batch in (4, 8, 16):
            depts, nbytes = 0, 0
            for _ in range(draws):
                ids = route(shape, torch.randn(batch, shape.n_expert, generator=gen))[0]
                depts += torch.unique(ids // shape.experts_per_dept).numel()
                nbytes += step_bytes(shape, ids)
            depts, nbytes = depts / draws, nbytes / draws
            over = (shape.n_dept - depts) * dept_up_bytes
            rows.append({"model": model, "batch": batch, "draws": draws, "n_dept": shape.n_dept,
                         "k_dept": shape.k_dept, "distinct_depts": depts,
                         "deamoe_bytes": nbytes, "dense_overread_bytes": over,
                         "overread_frac": over / nbytes})
            print(f"{model:16s} {batch:3d}  {depts:.3f} of {shape.n_dept} departments: the "
                  f"dense GEMM reads {over / 1e6:6.2f} MB more "
                  f"({100 * over / nbytes:.3f}% of the layer)")
    write_csv(Path(out) / "dense_overread.csv", pd.DataFrame(rows))
    return 0


def _merged(old, new):
    """old's rows in their order, each point new measured replaced there by new's row; then
    new's rows of points old lacks."""
    import pandas as pd

    key = [c for c in ("model", "batch", "weight_dtype") if c in old and c in new]
    new_keys = [tuple(r) for r in new[key].astype(str).to_numpy()]
    old_keys = [tuple(r) for r in old[key].astype(str).to_numpy()]
    at = {k: i for i, k in enumerate(new_keys)}
    rows = [new.iloc[[at[k]]] if k in at else old.iloc[[i]] for i, k in enumerate(old_keys)]
    had = set(old_keys)
    rows += [new.iloc[[i]] for i, k in enumerate(new_keys) if k not in had]
    return pd.concat(rows, ignore_index=True)


def _check_points(path: Path, table) -> None:
    """Each row of a device run's table names a point of Table 1: a microbench table's rows as
    their picks must be (model, batch, weight precision and knob sets: decode.picks), a decode
    table's a known model at a whole batch; a DataError naming the file and line."""
    from deamoe.decode.picks import TilePicks
    from deamoe.errors import DataError, DeaMoEError
    from deamoe.shapes import table1_row

    if "baseline_tile" in table or "deamoe_tile" in table:
        TilePicks.from_table(path)
        return
    for line, (model, batch) in enumerate(zip(table["model"].astype(str), table["batch"]), start=2):
        try:
            table1_row(model)
        except DeaMoEError as exc:
            raise DataError(f"{path}:{line}: {exc}") from None
        if batch != int(batch):
            raise DataError(f"{path}:{line}: column batch is {batch}, not a whole number of tokens")


def _sha_unsure(sha: str) -> bool:
    from deamoe.provenance import UNCOMMITTED

    return sha == "unknown" or sha.endswith(UNCOMMITTED)


def import_tables(dirs: list[Path], dest: Path, sha: str | None = None, merge: bool = False) -> int:
    """microbench.csv, microbench_fp8.csv and decode_tpot.csv of one run (several device calls: their rows
    concatenated, each keeping its own date, roofline and git_sha) into `dest`.  A device's
    copy of the tree has no .git (git_sha 'unknown') or an older one than its files
    ('<sha>+uncommitted'): the sha of the commit that was sent (default HEAD) is filled in.  A
    microbench.csv's "<model>+shared" layers (workflow/profiles/gpu/microbench-shared.yaml's
    run) go to microbench_shared.csv, where the report reads them, never over the main
    table; its other rows to microbench.csv.  Every row must name a point of Table 1
    (`_check_points`).  Under reports/measured/ the tables are replaced (this command owns them); elsewhere
    only a table deamoe wrote is.  merge: the destination's rows of the points the run did not
    measure (model, batch and, in an FP8 table, weight_dtype) are kept, in their place, the
    run's rows replacing the others."""
    import pandas as pd

    from deamoe.bench.shared import SHARED_FILE, is_shared
    from deamoe.errors import ConfigError, DataError, absent
    from deamoe.io import check_apart, check_outputs, is_committed, write_csvs
    from deamoe.readers import check_unique, read_table
    from deamoe.table_specs import table_spec

    twice = next((d for i, d in enumerate(dirs) if Path(d).resolve() in {Path(e).resolve() for e in dirs[:i]}),
                 None)
    if twice is not None:  # its rows would be imported twice
        raise ConfigError(f"bench import: {twice} is given twice; name each part of the run once")
    bad = next((d for d in dirs if not Path(d).is_dir()), None)
    if bad is not None:  # not "no table in it", which hides a mistyped name
        what = "not a folder" if Path(bad).exists() else "no such folder"
        raise DataError(f"bench import: {bad}: {what}")
    check_apart([("--dest", dest)], [("run folder", d) for d in dirs])  # else it replaces what it imports
    tables = {}
    for name in ("microbench.csv", "microbench_fp8.csv", "decode_tpot.csv"):
        # each part as the committed table must be (columns, numbers, provenance), before any write
        found = [d / name for d in dirs if not absent(d / name)]  # a link to nothing: named
        parts = [read_table(path, table_spec(name), name) for path in found]
        for path, part in zip(found, parts):
            _check_points(path, part)
        if not parts:
            continue
        df = pd.concat(parts, ignore_index=True)  # and no point measured by two parts
        check_unique(df, table_spec(name), lines=[f"{path}:{n + 2}" for path, part in zip(found, parts)
                                                  for n in range(len(part))])
        unsure = df["git_sha"].astype(str).map(_sha_unsure) if "git_sha" in df else None
        if unsure is not None and unsure.any():
            sha = sha or _head_sha()
            if not sha:
                raise ConfigError(f"bench import: {name} has rows of git_sha 'unknown' or "
                                  "'<sha>+uncommitted' (not the tree they ran) and `git rev-parse "
                                  "HEAD` gives no commit here; give --sha")
            df.loc[unsure, "git_sha"] = sha
        # '<model>+shared' layers go to their own table, never over the main one's rows
        shared = is_shared(df["model"]) & (name == "microbench.csv")
        for target, rows in ((SHARED_FILE, df[shared]), (name, df[~shared])):
            if rows.empty:
                continue
            if merge and (Path(dest) / target).is_file():
                rows = _merged(read_table(Path(dest) / target, table_spec(target), str(Path(dest) / target)), rows)
            chips = list(dict.fromkeys(rows["gpu"].dropna().astype(str))) if "gpu" in rows else []
            if len(chips) > 1:  # parts of two machines, or --merge into another chip's table
                raise DataError(f"bench import: {target} would hold rows of {chips[0]!r} and {chips[1]!r}: "
                                "one curve of two chips' times; import each chip's run into its own --dest")
            tables[target] = rows.reset_index(drop=True)
    if not tables:
        raise DataError(f"bench import: no microbench.csv, microbench_fp8.csv or decode_tpot.csv in "
                        f"{', '.join(map(str, dirs))}")
    # a table under reports/measured/ is replaced (its owner); elsewhere only what deamoe wrote
    paths = {name: Path(dest) / name for name in tables}
    owner = {name: is_committed(path) for name, path in paths.items()}
    for name, path in paths.items():  # every one before the first is written
        check_outputs(files=[path], replace_committed=owner[name], folders=[dest])
    # published together: a failed write leaves every old table or every new one
    write_csvs({paths[name]: df for name, df in tables.items()},
               committed={paths[name] for name in tables if owner[name]})
    written = list(tables)
    print(f"imported {', '.join(written)} into {dest}")
    return 0


def _head_sha() -> str:
    """The short sha of HEAD where the working directory is a git checkout, else ''."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
