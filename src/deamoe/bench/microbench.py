"""Per-layer decode microbenchmark (Figures 4/5): baseline fused MoE vs DeaMoE on one GPU.

For every (model, batch): router + routing + expert kernels of one layer, bf16, random weights,
CUDA graph, weights of several layer copies rotated so a replay reads far beyond L2.  Both
implementations run the same grouped-GEMM primitive and get the same tile search (each candidate
timed briefly, the best one re-timed with fresh replays for the reported median).  Bytes are the
weights this routing must load (router + distinct experts, or + distinct departments); achieved
TB/s is compared with the streaming-read roofline measured in the same run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from deamoe.bench.layer_step import ffn_step, layer_bytes, random_weights, step_bytes, time_fn
from deamoe.config import table1_row
from deamoe.routing import route

# vLLM's Triton fused MoE on this H200 (issue 5: bf16, default config, CUDA graphs, rotated
# weights), microseconds per layer: the peer our baseline must match.
VLLM_H200_US = {
    "DeepSeek-V3": {4: 638, 8: 1260, 16: 1963, 24: 2737, 32: 3172, 64: 4367, 96: 5090, 128: 5164},
    "Qwen3-235B-A22B": {4: 292, 8: 461, 16: 698, 32: 954, 64: 1094, 128: 1163},
    "Baseline-7B": {4: 33, 8: 52, 16: 80, 32: 114, 64: 154, 128: 174},
}


@dataclass
class MicrobenchSettings:
    """The `microbench` section of the pipeline config (see workflow/schemas/microbench.schema.yaml)."""

    models: list[str] = field(default_factory=lambda: ["Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B"])
    batches: list[int] = field(default_factory=lambda: [4, 8, 16, 24, 32, 40, 48, 64, 96, 128])
    tiles: list[str] = field(default_factory=lambda: [
        "n64-k128-w4-s4", "n32-k256-w4-s3", "n128-k128-w4-s3", "n64-k256-w4-s3"])
    block_m: int = 16
    rotate_bytes: float = 2.0e9
    max_copies: int = 16
    select_replays: int = 10
    replays: int = 50
    torch_reference: bool = True
    roofline_gib: float = 4.0
    battery: bool = True
    battery_tokens: list[int] = field(default_factory=lambda: [1, 13, 64, 256])
    decode: bool = True
    decode_models: list[str] = field(default_factory=lambda: ["Baseline-7B"])
    decode_layers: int = 24
    decode_heads: int = 16
    decode_context: int = 512
    decode_vocab: int = 32000
    decode_replays: int = 20
    seed: int = 0

    def __post_init__(self):
        from deamoe.config import table1_row as check
        from deamoe.errors import ConfigError
        from deamoe.kernels.grouped_gemm import TileConfig

        for m in self.models + self.decode_models:
            check(m)
        for t in self.tiles:
            try:
                TileConfig.parse(t)
            except ValueError as exc:
                raise ConfigError(f"microbench.tiles: {exc}") from None
        if not self.tiles:
            raise ConfigError("microbench.tiles must name at least one tile config")
        if any(b < 1 for b in self.batches + self.battery_tokens):
            raise ConfigError("microbench.batches and battery_tokens must be >= 1")


def _tiles(shape, name: str, block_m: int):
    from deamoe.config import DeaMoEShape
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.kernels.grouped_gemm import TileConfig

    t = TileConfig.parse(name)
    if isinstance(shape, DeaMoEShape):
        return DeaMoETiles(block_m, block_m, t, t, t, t)
    return MoETiles(block_m, t, t)


def bench_impl(shape, batches, s: MicrobenchSettings, device="cuda", impl="triton", progress=None):
    """Rows {batch, us, bytes, tile, ...} for one implementation of one layer shape."""
    copies = max(1, min(s.max_copies, math.ceil(s.rotate_bytes / layer_bytes(shape))))
    weights = [random_weights(shape, device, seed=s.seed + 100 * c) for c in range(copies)]
    rows = []
    for batch in batches:
        gen = torch.Generator(device=device).manual_seed(s.seed + batch)
        xs = [torch.randn(batch, shape.h, generator=gen, device=device, dtype=torch.bfloat16)
              for _ in range(copies)]
        with torch.no_grad():  # the routing the timed step will compute: count its bytes
            ids = [route(shape, torch.nn.functional.linear(x, w["router"]))[0]
                   for x, w in zip(xs, weights)]
        nbytes = sum(step_bytes(shape, i) for i in ids) / copies
        experts = sum(int(torch.unique(i).numel()) for i in ids) / copies
        candidates = s.tiles if impl == "triton" else ["library"]
        best = None
        for name in candidates:
            tiles = _tiles(shape, name, s.block_m) if impl == "triton" else None

            def run(tiles=tiles):
                for x, w in zip(xs, weights):
                    ffn_step(shape, w, x, impl=impl, tiles=tiles)

            try:
                t = time_fn(run, s.select_replays if len(candidates) > 1 else s.replays, copies)
            except Exception as exc:  # noqa: BLE001 - a tile that fails to compile is skipped
                print(f"  {shape.kind} {impl} batch {batch} tile {name}: {type(exc).__name__}: {exc}")
                continue
            if best is None or t.median_us < best[1].median_us:
                best = (name, t, run)
        if best is None:
            rows.append({"batch": batch, "us": float("nan"), "bytes": nbytes, "tile": "failed",
                         "experts": experts, "copies": copies})
            continue
        final = time_fn(best[2], s.replays, copies) if len(candidates) > 1 else best[1]
        rows.append({"batch": batch, "us": final.median_us, "p10_us": final.p10_us,
                     "p90_us": final.p90_us, "bytes": nbytes, "tile": best[0],
                     "experts": experts, "copies": copies})
        if progress is not None:
            progress.update(1)
    del weights
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def run_microbench(s: MicrobenchSettings, peak_read_tbps: float, device="cuda") -> list[dict]:
    """The microbench.csv rows (one per model and batch)."""
    import triton
    from tqdm import tqdm

    from deamoe.provenance import provenance

    prov = provenance(device)
    out = []
    n_impl = 3 if s.torch_reference else 2
    with tqdm(total=len(s.models) * len(s.batches) * n_impl, desc="microbench") as bar:
        for model in s.models:
            row = table1_row(model)
            base = bench_impl(row.baseline, s.batches, s, device, progress=bar)
            dea = bench_impl(row.deamoe, s.batches, s, device, progress=bar)
            ref = (bench_impl(row.baseline, s.batches, s, device, impl="torch", progress=bar)
                   if s.torch_reference else [{} for _ in s.batches])
            for b, d, r in zip(base, dea, ref):
                bt, dt = b["us"], d["us"]
                out.append({
                    "model": model, "batch": b["batch"],
                    "baseline_us": bt, "deamoe_us": dt, "speedup": bt / dt,
                    "ideal_speedup": b["bytes"] / d["bytes"],
                    "speedup_over_ideal": (bt / dt) / (b["bytes"] / d["bytes"]),
                    "baseline_bytes": b["bytes"], "deamoe_bytes": d["bytes"],
                    "baseline_tbps": b["bytes"] / bt / 1e6, "deamoe_tbps": d["bytes"] / dt / 1e6,
                    "peak_read_tbps": peak_read_tbps,
                    "baseline_frac_peak": b["bytes"] / bt / 1e6 / peak_read_tbps,
                    "deamoe_frac_peak": d["bytes"] / dt / 1e6 / peak_read_tbps,
                    "torch_grouped_us": r.get("us", float("nan")),
                    "vllm_h200_us": VLLM_H200_US.get(model, {}).get(b["batch"], float("nan")),
                    "baseline_experts": b["experts"], "deamoe_experts": d["experts"],
                    "baseline_tile": b["tile"], "deamoe_tile": d["tile"],
                    "baseline_p10_us": b.get("p10_us"), "baseline_p90_us": b.get("p90_us"),
                    "deamoe_p10_us": d.get("p10_us"), "deamoe_p90_us": d.get("p90_us"),
                    "copies": b["copies"], "block_m": s.block_m,
                    "gpu": prov["device"], "torch": prov["torch"], "triton": triton.__version__,
                    "date": prov["date"], "git_sha": prov["git_sha"],
                })
    return out
