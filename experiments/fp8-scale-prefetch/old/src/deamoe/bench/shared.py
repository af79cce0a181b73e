"""The microbenchmark's layers with shared experts ("<model>+shared" presets).

Their shared experts run on the grouped-GEMM primitive beside the routed layer
(deamoe.kernels.shared_expert): the up-projection either in line or on its own side stream
beside the routed launches (`microbench.shared_stream` lists the schedules tried).  The routed
knobs are searched as for any layer; then each schedule is timed on the point's pick, on the
reported graph, and the faster is reported (`<kind>_shared_stream` in microbench.csv).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deamoe.shapes import SHARED_SUFFIX

# where the committed "+shared" rows live beside the main table (reports/measured/<gpu>/): `bench
# import` files a run with "+shared" layers there, and the report reads them from there
SHARED_FILE = "microbench_shared.csv"


def is_shared(models):
    """Which of a pandas Series of model names are "<model>+shared" layers."""
    return models.astype(str).str.endswith(SHARED_SUFFIX)

def shared_schedule(shape, runner, s, per_call: int, inputs, knobs):
    """(run, stream): runner(SharedTiles) -> the point's timed fn on its pick `knobs`; for a
    layer with shared experts the faster of s.shared_stream's schedules (stream None for one
    without; run None when no knobs were found or no schedule runs)."""
    from deamoe.bench.layer_step import time_fn
    from deamoe.kernels.shared_expert import SharedTiles

    if not knobs:
        return None, None
    if not shape.n_shared:
        return runner(None), None
    timed = []
    for stream in dict.fromkeys(s.shared_stream):
        run = runner(SharedTiles(block_m=s.block_m, stream=stream))
        try:
            us = time_fn(run, s.replays, per_call, prepare=inputs.prepare).median_us
        except Exception as exc:  # noqa: BLE001 - the other schedule may still run
            print(f"  shared_stream={stream}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        timed.append((us, stream, run))
    if not timed:
        return None, None
    _, stream, run = min(timed, key=lambda r: r[0])
    return run, stream


def prior_for(paths: list[str], model: str, kind: str,
              precision: str = "bf16") -> dict[int, list[dict]]:
    """Earlier picks for `model` (search.prior_picks) in this weight precision; a
    "<model>+shared" layer without its own takes the routed layer's (the same routed GEMMs;
    its shared experts have their own)."""
    from deamoe.bench.search import prior_picks

    return (prior_picks(paths, model, kind, precision)
            or prior_picks(paths, model.removesuffix(SHARED_SUFFIX), kind, precision))


def shared_columns(row, b: dict, d: dict) -> dict:
    """microbench.csv columns of a layer pair with shared experts (none for one without)."""
    if not row.baseline.n_shared:
        return {}
    return {"n_shared": row.baseline.n_shared, "baseline_shared_stream": b.get("shared_stream"),
            "deamoe_shared_stream": d.get("shared_stream")}


def shared_schedules(rows) -> dict[tuple[str, str], dict[int, bool]]:
    """{(model, kind): {batch: stream}}: the schedule of the shared experts each microbench.csv
    row picked (`<kind>_shared_stream`), for the layers that have them."""
    out: dict = {}
    for r in rows:
        for kind in ("baseline", "deamoe"):
            v = r.get(f"{kind}_shared_stream")
            if str(v) in ("True", "False"):  # None / NaN: no shared experts, or no pick
                out.setdefault((r["model"], kind), {})[int(r["batch"])] = str(v) == "True"
    return out


@dataclass(frozen=True)
class SharedSchedules:
    """The schedules of the shared experts the per-layer run picked, {(model, kind): {batch:
    stream}} (shared_schedules), and the BLOCK_M their GEMMs run with: what the model-level
    decode benchmark runs them on."""

    picked: dict = field(default_factory=dict)
    block_m: int = 16

    def tiles(self, model: str, kind: str, batch: int):
        """SharedTiles for a decode step of `batch` tokens: the schedule the nearest measured
        batch picked (deamoe.decode.picks.nearest_batch), or None (ffn_step's default: in
        line) where none was measured."""
        from deamoe.decode.picks import nearest_batch
        from deamoe.kernels.shared_expert import SharedTiles

        by_batch = self.picked.get((model, kind))
        if not by_batch:
            return None
        return SharedTiles(block_m=self.block_m, stream=by_batch[nearest_batch(by_batch, batch)])
