"""The GPU run behind `python -m deamoe microbench`: every part, results written as they finish.

Writes under OUT: roofline.json, battery.csv, microbench_points.csv, microbench.csv,
microbench_fp8.csv (the FP8 precisions of microbench.weight_dtype) and
stages.csv (rewritten after each finished point, deamoe.bench.points: a run cut short keeps every
point it finished, and a re-run on the same OUT measures only the others), vllm_peer.csv (vLLM's
own kernel beside our baseline, where vLLM is installed), decode_tpot.csv, status.json.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.microbench import run_microbench
from deamoe.bench.points import PointStore
from deamoe.bench.settings import MicrobenchSettings
from deamoe.io import write_csv, write_json
from deamoe.provenance import provenance


def _vllm_peer(s: MicrobenchSettings, out: Path, rows: list[dict], peak: float) -> dict:
    """vLLM's own kernel beside this run's baseline picks, every point (deamoe.bench.vllm_peer):
    its status part.  Not run without an installed vLLM to copy the kernel from; a failure is
    recorded, not raised (the per-layer tables are already written)."""
    import importlib.util

    from deamoe.bench import vllm_peer, vllm_peer_run

    if importlib.util.find_spec("vllm") is None:
        why = "vLLM is not installed (pip install vllm): nothing to copy its kernel from"
        print(f"vllm peer: not run: {why}", flush=True)
        return {"status": "not run", "reason": why}
    kernel = out / "vllm_kernel" / "vllm_fused_moe.py"
    points = list(dict.fromkeys(f"{r['model']}:{r['batch']}" for r in rows))
    try:
        vllm_peer.extract(kernel)
        vllm_peer_run.run_peer(kernel, points, out, out / "microbench.csv", peak=peak,
                               settings=s, precisions=tuple(s.weight_dtype))
    except Exception as exc:  # noqa: BLE001 - reported in status.json and the log
        print(f"vllm peer failed: {type(exc).__name__}: {exc}", flush=True)
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    return {"status": "ok", "points": len(points)}


def decode_tiles(rows: list[dict], extra: list[dict] = ()):
    """The decode benchmark's TilePicks: this run's per-layer picks, and for (shape, batch) points
    this run did not measure, those of `extra` (rows of another microbench.csv, e.g. a committed
    table); a batch neither measured runs the nearest measured batch's pick."""
    from deamoe.decode.picks import TilePicks

    return TilePicks.from_rows(rows, "this run").merged(TilePicks.from_rows(extra, "tiles-from"))


def run_all(s: MicrobenchSettings, out: Path, skip: set[str], tiles_from: Path | None = None) -> int:
    import triton
    from tqdm import tqdm

    s_run = dataclasses.replace(s, torch_reference=s.torch_reference and "torch" not in skip)
    # the points a stopped run on `out` finished, read (and their settings checked) before any
    # GPU work: this run measures the others only
    store = PointStore.open(out, s_run) if "layers" not in skip else None
    prov = provenance("cuda")
    status = {"status": "ok", **prov, "triton": triton.__version__, "parts": {}}
    t0 = time.time()
    peak = float("nan")
    if "roofline" not in skip:
        from deamoe.kernels.stream_read_benchmark import measure_read_roofline

        roof = measure_read_roofline(s.roofline_gib)
        peak = roof["peak_read_tbps"]
        write_json(out / "roofline.json", {**roof, **prov, "triton": triton.__version__})
        print(f"read roofline {peak:.3f} TB/s (torch.sum {roof['torch_sum_tbps']:.3f})", flush=True)
        status["parts"]["roofline"] = {"peak_read_tbps": peak, "s": time.time() - t0}
    if "battery" not in skip and s.battery:
        from deamoe.kernels.battery import full_battery

        rows = []
        with tqdm(desc="battery") as bar:
            for precision in dict.fromkeys(["bf16", *s.weight_dtype]):  # FP8 weights too
                rows += full_battery("cuda", torch.bfloat16, s.battery_tokens, progress=bar,
                                     fp8=s.fp8_format(precision))
        df = pd.DataFrame(rows)
        write_csv(out / "battery.csv", df)
        bad = df[~df["ok"]]
        print(f"battery: {len(df) - len(bad)}/{len(df)} ok, max rel err {df['rel_err'].max():.2e}",
              flush=True)
        if len(bad):
            print(bad.to_string())
            status["status"] = "battery failures"
        status["parts"]["battery"] = {"cases": len(df), "failed": int(len(bad)),
                                      "max_rel_err": float(df["rel_err"].max()), "s": time.time() - t0}
    rows, fp8_rows = [], []
    if store is not None:
        rows = run_microbench(s_run, peak, store=store)
        fp8_rows = store.fp8_table(s.models, s.batches)
        cols = ["model", "weight_dtype", "batch", "baseline_us", "deamoe_us", "speedup",
                "ideal_speedup", "speedup_over_ideal", "baseline_frac_peak", "deamoe_frac_peak",
                "torch_grouped_us", "vllm_h200_us", "baseline_from_logits_us"]
        for df in (pd.DataFrame(t) for t in (rows, fp8_rows) if t):
            print(df[[c for c in cols if c in df]].to_string(
                index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
        if store.stages:
            st = pd.DataFrame(store.stages)
            print(st.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
        status["parts"]["layers"] = {"rows": len(rows) + len(fp8_rows), "s": time.time() - t0}
    if "vllm_peer" not in skip and s.vllm_peer and (rows or fp8_rows):
        status["parts"]["vllm_peer"] = _vllm_peer(s, out, rows + fp8_rows, peak)
        status["parts"]["vllm_peer"]["s"] = time.time() - t0
    if "decode" not in skip and s.decode:
        from deamoe.bench.decode import DecoderShape, run_decode, tpot_table
        from deamoe.bench.shared import SharedSchedules, shared_schedules
        extra = pd.read_csv(tiles_from).to_dict("records") if tiles_from is not None else []
        best = decode_tiles(rows, extra)
        dec = DecoderShape.of(s)
        with tqdm(total=2 * len(s.decode_models) * len(s.decode_batches), desc="decode") as bar:
            raw = run_decode(s.decode_models, s.decode_batches, dec, s.decode_replays, tiles=best,
                             seed=s.seed, progress=bar,
                             shared=SharedSchedules({**shared_schedules(extra),
                                                     **shared_schedules(rows)}, s.block_m))
        table = pd.DataFrame(tpot_table(raw, prov, dec))
        write_csv(out / "decode_tpot.csv", table)
        print(table[["model", "batch", "baseline_tpot_ms", "deamoe_tpot_ms", "speedup"]]
              .to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
        status["parts"]["decode"] = {"rows": len(table), "s": time.time() - t0,
                                     "tiles_from": str(tiles_from) if extra else "this run"}
    write_json(out / "status.json", status)
    return 0 if status["status"] == "ok" else 1
