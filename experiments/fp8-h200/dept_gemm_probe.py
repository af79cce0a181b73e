"""Probe: DeaMoE's FP8 (w8a8) department GEMMs alone at 64 / 128 tokens, beside cuBLAS's FP8 GEMM.

At 64-128 tokens on the H200 they stream at 0.34-0.76 of the read roofline, the expert GEMMs at
0.90-0.97 (docs/kernels-fp8.md, "Searched again on an H200").  For DeepSeek-V3 and Qwen3-235B-A22B
each GEMM is timed alone in a CUDA graph cycling --copies weight copies (L2 holds none; template:
git show d0c7b7b:experiments/dense-stacked/probe.py): dept_up (routed gate|up + silu), dept_down
(routed, summed into out) and dept_up_dense (the layer's dense_dept_up) as the layer launches
them, on dept_block_m 16..128 (<= next_pow2(batch)) x microbench.fp8_tiles of
h200_fp8_prior.yaml + EXTRA_TILES + the committed H200 pick; a set over the shared memory
estimate or failing to compile is a row with its status.  '-pq' quantiser launches are timed.
The bar (cublas_bar.py): torch._scaled_mm (cuBLAS), e4m3 operands, one GEMM per department on its
rows (padded to 16; gate and up stacked): tensor-/row-wise scales (+ fast accumulation;
placeholder weight scales, a speed bar) and 1x128 x 128x128 block-wise (our numbers; cuBLAS >=
12.9 on sm_90, else a 'failed' row); torch._scaled_grouped_mm (row-wise, one launch); for dense also one GEMM over all
departments, alone and as the layer's stage (A's quantiser, the GEMM, silu: '1gemm-block-stage');
elsewhere A's quantiser is not in cuBLAS's span.  The block-scaled outputs are checked against
float32 on the dequantised weights (rel. Frobenius error, tolerance 1e-1 as the w8a8 battery's).

GPU (one H100/H200, ~4 min; Triton's kernels first compiled by --jobs worker processes):
  DEAMOE_GIT_SHA=<sha> PYTHONPATH=src python3 experiments/fp8-h200/dept_gemm_probe.py --out $OUT
CPU check (interpreter, small widths, no timing; exit status 1 if a check fails):
  TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python experiments/fp8-h200/dept_gemm_probe.py --tiny
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

import deamoe  # noqa: F401  (sets TRITON_INTERPRET=1 where there is no GPU, before Triton loads)
from deamoe.bench.layer_step import time_fn
from deamoe.bench.search import block_m_values
from deamoe.bench.settings import MicrobenchSettings
from deamoe.decode.knobs import parse_knobs
from deamoe.io import write_csv
from deamoe.kernels.align import AlignSpec, align, dense_alignment
from deamoe.kernels.deamoe_decode import DEPT_DOWN, DEPT_UP, dept_down_gemm, dept_up_gemm
from deamoe.kernels.fp8 import Fp8Format, Fp8Weight, quantize
from deamoe.kernels.gemm_spec import shared_memory_limit
from deamoe.kernels.grouped_gemm import bf16_atomics, output_dtype
from deamoe.kernels.stream_read_benchmark import measure_read_roofline
from deamoe.kernels.tile_config import TileConfig
from deamoe.provenance import provenance, version
from deamoe.routing import department_mask, route
from deamoe.settings import load_section
from deamoe.shapes import table1_row

from cublas_bar import cublas_variants, rel_err  # this folder (sys.path[0] of a script)

ROOT = Path(__file__).resolve().parents[2]
PRIOR = ROOT / "experiments/fp8-h200/h200_fp8_prior.yaml"
PICKS = ROOT / "reports/measured/h200/microbench_fp8.csv"
FMT = Fp8Format.of("fp8-w8a8")
GEMMS = ("dept_up", "dept_down", "dept_up_dense")
# 8-warp tiles for 64-128-row blocks (the search kept BLOCK_M 64, 4 warps); all compile for sm_90
# (Triton 3.9 on the CPU) within 227 KiB but dept_up's n256-s3 at 128 rows, which is skipped
EXTRA_TILES = ["n128-k128-w8-s3-pq", "n128-k128-w8-s4-tma-pq", "n256-k128-w8-s3-tma-pq",
               "n256-k128-w8-s2-tma-pq", "n64-k128-w8-s4-tma-pq", "n128-k128-w8-s4-tma-swap-pq"]
TINY_TILES = ["n64-k128-w4-s4-pq", "n128-k128-w4-s4-tma-pq", "n64-k128-w4-s4",
              "n128-k128-w8-s3-pq", "n64-k128-w4-s6-tma-swap-pq"]
TOL = 1e-1  # deamoe.kernels.battery.tolerance for w8a8 (activations quantised, reference not)
PEAK_BF16, PEAK_FP8 = 989.0, 1979.0  # H100/H200 SXM dense tensor-core TFLOP/s (spec sheets)
FINALISTS = 3  # best Triton variants of each GEMM re-timed at the end of a point
T0 = time.time()


def log(msg: str) -> None:  # bytes (in the rows) = e4m3 weights of the departments used + scales
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def prior_tiles() -> list[str]:
    """microbench.fp8_tiles of the prior yaml, through the config loader `bench microbench` uses."""
    return list(load_section(PRIOR, "microbench", MicrobenchSettings).fp8_tiles)


def committed_pick(model: str, batch: int) -> dict:
    """{gemm: (tile, block_m)} of the committed H200 w8a8 DeaMoE pick at this point ({} if none)."""
    t = pd.read_csv(PICKS)
    r = t[(t.model == model) & (t.batch == batch) & (t.weight_dtype == "fp8-w8a8")]
    if r.empty:
        return {}
    k = parse_knobs(r.deamoe_tile.iloc[0])  # (no dense_block_m: dense on dept_block_m)
    return {g: (k[g.removesuffix("_dense")], k["dept_block_m"]) for g in GEMMS}


def model_shape(model: str, tiny: bool):
    shape = table1_row(model).deamoe
    # tiny: widths the interpreter runs in seconds, 4 experts a department, the same routing rule
    return shape.replace(h=256, h_ffn=128, n_expert=32, k_expert=8) if tiny else shape


def make_weights(shape, copies: int, dev: str) -> list[dict]:
    """Department weights block-quantised as the layer's (fp8.quantize); 'both': gate and up as
    one [2 h_ffn, h] matrix a department for cuBLAS (extra memory: ours takes two stacks)."""
    d, f, h = shape.n_dept, shape.h_ffn, shape.h
    out = []
    for c in range(copies):
        g = torch.Generator(device=dev).manual_seed(1000 + c)
        gate, up, down = (quantize(torch.randn(d, n, k, generator=g, device=dev,
                                               dtype=torch.bfloat16) * k ** -0.5, FMT)
                          for n, k in ((f, h), (f, h), (h, f)))
        both = Fp8Weight(torch.cat([gate.q, up.q], 1).contiguous(),
                         torch.cat([gate.scale, up.scale], 1).contiguous(), FMT)
        out.append({"gate": gate, "up": up, "down": down, "both": both})
    return out


class Point:
    """One (model, batch): x, a routing of random logits (the layer's rule), S, outputs."""

    def __init__(self, shape, batch: int, weights: list[dict], dev: str):
        self.shape, self.T, self.w, self.dev = shape, batch, weights, dev
        d, f, h = shape.n_dept, shape.h_ffn, shape.h
        self.per = shape.n_expert // d
        g = torch.Generator(device=dev).manual_seed(batch)
        self.x = torch.randn(batch, h, generator=g, device=dev, dtype=torch.bfloat16)
        self.ids = route(shape, torch.randn(batch, shape.n_expert, generator=g, device=dev))[0]
        self.mask = department_mask(self.ids, d, self.per)  # [T, d]: token t uses department j
        s_dtype = torch.bfloat16 if bf16_atomics(self.x) else torch.float32  # the layer's s_bf16
        s = torch.randn(batch, d, f, generator=g, device=dev) * self.mask[..., None]  # 0: unused
        self.s = s.reshape(batch * d, f).to(s_dtype)
        self.a1 = [torch.empty(batch * d, 2 * f, device=dev, dtype=torch.bfloat16) for _ in weights]
        self.out = [torch.zeros(batch, h, device=dev, dtype=output_dtype(self.x)) for _ in weights]

    def rows(self, gemm: str) -> torch.Tensor:  # [d]: the rows of each department's GEMM
        dense = gemm == "dept_up_dense"
        return torch.full((self.shape.n_dept,), self.T) if dense else self.mask.sum(0).cpu()

    def size(self, gemm: str) -> tuple[int, int]:  # (N, K) of one department's matrix
        f, h = self.shape.h_ffn, self.shape.h
        return (h, f) if gemm == "dept_down" else (2 * f, h)

    def reference(self) -> dict:
        """float32 on copy 0's dequantised weights: [T, d, N] before the epilogue ('raw_*')."""
        w, T, d = self.w[0], self.T, self.shape.n_dept
        up = torch.einsum("th,jnh->tjn", self.x.float(), w["both"].dequantize())
        down = torch.einsum("tjf,jhf->tjh", self.s.float().view(T, d, -1), w["down"].dequantize())
        return {"raw_up": up, "raw_down": down, "dept_up": F.silu(up), "dept_down": down.sum(1)}


def triton_fns(p: Point, gemm: str, tile: TileConfig, bm: int):
    """(run on every copy: timed, run on copy 0: checked) of a Triton variant; the alignment
    (a launch of its own in the layer) is made here, outside both."""
    d = p.shape.n_dept
    if gemm == "dept_up_dense":
        al, rows = dense_alignment(p.T, d, p.per, bm, p.dev)
    else:
        (al,) = align(p.ids, AlignSpec(n_groups=d, per_group=p.per, dedup=True, block_m=bm))
        rows = p.ids

    def run(copies):
        for i, w in ((i, p.w[i]) for i in copies):
            if gemm == "dept_down":
                dept_down_gemm(p.s, w["down"], p.out[i], al, rows, p.per, tile)
            else:
                dept_up_gemm(p.x, w["gate"], w["up"], p.a1[i], al, rows, p.per, tile, "silu")
    return (lambda: run(range(len(p.w)))), (lambda: run([0]))


def triton_rel(p: Point, gemm: str, first, ref: dict) -> float:
    """Copy 0's output (poisoned, or zeroed where summed, first) against the reference."""
    if gemm == "dept_down":
        p.out[0].zero_()
        first()
        return rel_err(p.out[0].float(), ref["dept_down"])
    p.a1[0].fill_(float("nan"))
    first()
    rows = slice(None) if gemm == "dept_up_dense" else p.mask  # rows a routed GEMM writes
    return rel_err(p.a1[0].float().view(p.T, p.shape.n_dept, -1)[rows], ref["dept_up"][rows])


def plan(model: str, batch: int, tiles: list[str], bms, tiny: bool) -> list[tuple]:
    """[(gemm, tile, block_m, smem estimate)]: tiles x block_m's, + the pick ('-nf') if missing."""
    picks = {} if tiny else committed_pick(model, batch)
    out = []
    for gemm in GEMMS:
        spec = DEPT_DOWN if gemm == "dept_down" else DEPT_UP
        pairs = [(t, bm) for bm in block_m_values(bms, batch) for t in tiles]
        pairs += [picks[gemm]] if gemm in picks and picks[gemm] not in pairs else []
        out += [(gemm, t, bm, spec.on(TileConfig.parse(t)).shared_memory(bm, 2, FMT))
                for t, bm in pairs]
    return out


def precompile(job) -> int:
    """Worker process: run each (gemm, tile, block_m) of `job` once at the model's widths, so
    Triton's disk cache holds every kernel the timed loop launches (keyed on widths, not tokens)."""
    model, tiny, batch, todo = job
    shape = model_shape(model, tiny)
    p = Point(shape, batch, make_weights(shape, 1, "cuda"), "cuda")
    for gemm, name, bm in todo:
        try:
            triton_fns(p, gemm, TileConfig.parse(name), bm)[1]()
        except Exception:  # noqa: BLE001 - the timed loop records it
            pass
    torch.cuda.synchronize()
    return len(todo)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for dept_gemm_probe.csv")
    ap.add_argument("--models", default="DeepSeek-V3,Qwen3-235B-A22B")
    ap.add_argument("--batches", default=None, help="default 64,128 (--tiny: 20)")
    ap.add_argument("--block-m", default="16,32,64,128")
    ap.add_argument("--tiles", default=None, help="comma list (default: the prior's + extras)")
    ap.add_argument("--copies", type=int, default=4, help="weight copies a timed graph cycles")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=12, help="compile workers (0: compile inline)")
    ap.add_argument("--budget-s", type=float, default=420, help="no variant starts after this")
    ap.add_argument("--peak-read-tbps", type=float, default=None, help="instead of measuring it")
    ap.add_argument("--tiny", action="store_true", help="small widths (CPU: checks, no timing)")
    a = ap.parse_args(argv)
    dev = "cuda" if (cuda := torch.cuda.is_available()) else "cpu"
    models = a.models.split(",")[:1 if a.tiny and a.models == ap.get_default("models") else None]
    batches = [int(b) for b in (a.batches or ("20" if a.tiny else "64,128")).split(",")]
    tiles = a.tiles.split(",") if a.tiles else TINY_TILES if a.tiny else prior_tiles() + EXTRA_TILES
    if any(TileConfig.parse(t).qout or TileConfig.parse(t).qscale for t in tiles):
        sys.exit("'-qo' / '-qs' tiles (an output stored for the next GEMM) are not built here")
    bms = [int(b) for b in a.block_m.split(",")]
    copies, limit = a.copies if cuda else 1, shared_memory_limit(dev)
    plans = {(m, b): plan(m, b, tiles, bms, a.tiny) for m in models for b in batches}
    n_all = sum(len(v) for v in plans.values())
    n_fit = sum(limit is None or v[3] <= limit for vs in plans.values() for v in vs)
    log(f"{len(models)} models x {len(batches)} batches, {len(tiles)} tiles: {n_all} Triton "
        f"variants, {n_all - n_fit} over shared memory; ~{23 * len(plans)} cuBLAS; {copies} copies")
    if cuda and a.jobs > 0:  # every kernel compiled first, in parallel (one compile: ~1-2.5 s)
        pairs = {m: sorted({v[:3] for b in batches for v in plans[(m, b)]
                            if limit is None or v[3] <= limit}) for m in models}
        jobs = [(m, a.tiny, max(batches), ps[i::a.jobs]) for m, ps in pairs.items()
                for i in range(a.jobs)]
        try:
            with mp.get_context("spawn").Pool(a.jobs) as pool:
                n = sum(pool.map(precompile, [j for j in jobs if j[3]], chunksize=1))
            log(f"tried {n} kernel launches in {a.jobs} compile workers")
        except Exception as exc:  # noqa: BLE001 - then each kernel compiles when first run
            log(f"precompile failed ({type(exc).__name__}: {exc}); compiling inline")
    prov, peak = provenance(dev), a.peak_read_tbps
    if peak is None and cuda:  # the project's streaming-read roofline, measured here
        peak = measure_read_roofline(gib=4.0)["peak_read_tbps"]
    meta = {"gpu": prov.pop("device"), **prov, "triton": version("triton"), "copies": copies,
            "replays": a.replays, "peak_read_tbps": peak}  # prov: git_sha, date, python, torch
    log(f"read roofline {peak} TB/s on {meta['gpu']}; git {meta['git_sha']}")
    rows, fns = [], {}

    def timed(fn, row, replays):
        t = time_fn(fn, replays, per_call=copies)  # one call: the GEMM on every copy
        row.update(us=t.median_us, p10_us=t.p10_us, p90_us=t.p90_us)
        row.update(tbps=row["bytes"] / t.median_us / 1e6, tflops=row["flop"] / t.median_us / 1e6)
        row.update(frac_read=row["tbps"] / peak, frac_bf16_989=row["tflops"] / PEAK_BF16,
                   frac_fp8_1979=row["tflops"] / PEAK_FP8)

    def measure(row, make, launches) -> dict:
        """Append the row; make() -> (timed fn, rel err or NaN), then timed where CUDA is."""
        rows.append(row)
        if limit is not None and row.get("smem_estimate", 0) > limit:
            row["status"] = "skipped: smem"
        elif cuda and time.time() - T0 > a.budget_s:
            row["status"] = "skipped: budget"
        else:
            try:
                fn, row["rel_err"] = make()
                if cuda:
                    timed(fn, row, a.replays)
                    fns[len(rows) - 1] = fn
                row.update(status="ok", launches=launches)
            except Exception as exc:  # noqa: BLE001 - no compile, no block-wise cuBLAS, ...
                why = (str(exc) or " ").splitlines()[0][:120]
                row["status"] = f"failed: {type(exc).__name__}: {why}"
        return row

    def report(done, what):  # a progress line
        ran = [r for r in done if r["status"] == "ok"]
        best = min((r for r in ran if "us" in r), key=lambda r: r["us"], default=None)
        rel = max((r["rel_err"] for r in ran if r["rel_err"] == r["rel_err"]), default=0)
        log(f"{what}: {len(ran)} of {len(done)} ran, max rel {rel:.3g}"
            + (f"; best {best['variant']} {best['us']:.1f} us, {best['frac_read']:.2f} of the "
               f"read roofline, {best['tflops']:.0f} TFLOP/s" if best else ""))

    for model in models:
        shape = model_shape(model, a.tiny)
        weights = make_weights(shape, copies, dev)
        for batch in batches:
            p = Point(shape, batch, weights, dev)
            ref, fns = p.reference(), {}
            picks = {} if a.tiny else committed_pick(model, batch)
            for gemm in GEMMS:
                (N, K), r = p.size(gemm), p.rows(gemm)
                used, n_rows = int((r > 0).sum()), int(r.sum())
                base = {"model": model, "batch": batch, "gemm": gemm, "rows": n_rows,
                        "depts": used, "flop": 2 * n_rows * N * K, "weight_bytes": used * N * K}
                if cuda:  # the bar
                    done = [measure({**base, "impl": "cublas", "variant": how, "block_m": "",
                                     "bytes": base["weight_bytes"] + sbytes},
                                    lambda fn=fn, rel=rel: (fn, rel), launches)
                            for how, (fn, launches, sbytes, rel)
                            in cublas_variants(p, gemm, ref).items()]
                    report(done, f"{model} T={batch} {gemm} cuBLAS")
                for bm in block_m_values(bms, batch):
                    done = []
                    for _, name, _, smem in (v for v in plans[(model, batch)]
                                             if v[:3:2] == (gemm, bm)):
                        def make(tile=TileConfig.parse(name), bm=bm):
                            fn, first = triton_fns(p, gemm, tile, bm)
                            return fn, triton_rel(p, gemm, first, ref)
                        done.append(measure({**base, "impl": "triton", "variant": name,
                                             "block_m": bm, "smem_estimate": smem,
                                             "bytes": used * FMT.matrix_bytes(N, K),
                                             "pick": picks.get(gemm) == (name, bm)},
                                            make, 1 + TileConfig.parse(name).preq))
                    report(done, f"{model} T={batch} {gemm} bm={bm}")
            if cuda:
                finals(rows, fns, lambda fn, r: timed(fn, r, 2 * a.replays),
                       lambda: time.time() - T0 > a.budget_s + 60)
            if a.out:
                write(a.out, rows, meta)
    failed = summary(rows, peak)
    if a.out:
        log(f"wrote {write(a.out, rows, meta)}")
    return 1 if failed else 0


def finals(rows, fns, timed, late) -> None:
    """final_us: each GEMM's best Triton variants, pick, best 2 cuBLAS (`fns`: this point's)
    re-timed in two interleaved rounds (a slow drift hits all alike), the lower time."""
    for gemm in GEMMS:
        mine = sorted((i for i in fns if rows[i]["gemm"] == gemm), key=lambda i: rows[i]["us"])
        tri = [i for i in mine if rows[i]["impl"] == "triton"]
        for i in list(dict.fromkeys(tri[:FINALISTS] + [i for i in tri if rows[i].get("pick")]
                                    + [i for i in mine if rows[i]["impl"] == "cublas"][:2])) * 2:
            r = {"flop": rows[i]["flop"], "bytes": rows[i]["bytes"]}  # scratch: its time kept
            if not late():
                timed(fns[i], r)
                rows[i]["final_us"] = min(rows[i].get("final_us", r["us"]), r["us"])


def summary(rows, peak) -> int:
    """A line per (model, batch, GEMM): checks, best Triton, pick, best cuBLAS; failed checks."""
    failed = 0
    for k in dict.fromkeys((r["model"], r["batch"], r["gemm"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["batch"], r["gemm"]) == k]
        rels = [r["rel_err"] for r in mine if r["impl"] == "triton" and r["status"] == "ok"]
        failed += sum(not e < TOL for e in rels)
        line = f"{k[0]} T={k[1]} {k[2]}: {len(rels)} Triton checked, max rel {max(rels + [0]):.3g}"
        for label, kind in (("Triton", "triton"), ("pick", True), ("cuBLAS", "cublas")):
            got = [(r.get("final_us", r["us"]), r) for r in mine
                   if "us" in r and kind in (r["impl"], r.get("pick"))]
            if got:
                us, r = min(got, key=lambda t: t[0])
                line += (f"; {label} {r['variant']} {r['block_m']} {us:.1f} us "
                         f"({r['bytes'] / us / 1e6 / peak:.2f})")
        log(line)
    log(f"checks (tol {TOL}): {'all within' if not failed else f'{failed} FAILED'}; "
        "(x.xx) = fraction of the read roofline")
    return failed


def write(out: Path, rows: list[dict], meta: dict) -> Path:
    cols = ("model batch gemm impl variant block_m pick status rows depts us final_us p10_us "
            "p90_us bytes weight_bytes tbps frac_read flop tflops frac_bf16_989 frac_fp8_1979 "
            "launches rel_err smem_estimate").split() + list(meta)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "dept_gemm_probe.csv"  # rewritten after each point: atomically, never half
    write_csv(path, pd.DataFrame([{**r, **meta} for r in rows]).reindex(columns=cols))
    return path


if __name__ == "__main__":
    sys.exit(main())
