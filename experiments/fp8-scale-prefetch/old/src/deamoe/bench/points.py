"""The per-layer microbenchmark's finished points, kept as they finish so a stopped run loses none.

A point is one layer of one model at one batch: (model, layer, batch), the layer "baseline",
"deamoe" or "torch" (the baseline's library reference); with FP8 weights "baseline@fp8",
"deamoe@fp8-w8a8", ... (`layer_label`), whose pairs go to OUT/microbench_fp8.csv (one row per
model, batch and precision, `weight_dtype`).  A `PointStore` holds them.  With an
output folder, every finished point is written at once, each file to a temporary name renamed
over the old one (deamoe.io): OUT/microbench_points.csv (one row a point: its time, bytes and
picked knobs, the read roofline and provenance of the call that measured it, and the settings it
was measured with), OUT/stages.csv (the per-GEMM breakdowns) and OUT/microbench.csv (every
(model, batch) whose two layers are done).  `PointStore.open` reads a folder's points back, so a
re-run on it measures only the points it lacks; a point measured with other settings is never
taken: the run stops, naming the file and each setting that differs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from deamoe.readers import TEXT_COLUMNS
from deamoe.shapes import FFN_TYPES

LAYERS = ("baseline", "deamoe", "torch")
POINTS_FILE = "microbench_points.csv"
FP8_FILE = "microbench_fp8.csv"  # the FP8 precisions' pairs, beside microbench.csv
# MicrobenchSettings fields that choose which points (or which other parts) run, not how a point
# is measured: a stopped run may go on with other values of these
NOT_POINT_SETTINGS = ("models", "batches", "torch_reference", "stage_batches", "roofline_gib",
                      "battery", "battery_tokens", "vllm_peer", "decode", "decode_models",
                      "decode_batches", "decode_layers", "decode_heads", "decode_context",
                      "decode_vocab", "decode_replays", "weight_dtype")


def layer_label(layer: str, precision: str = "bf16") -> str:
    """A point's layer name: "baseline", or "baseline@fp8" for a precision other than bf16."""
    return layer if precision == "bf16" else f"{layer}@{precision}"


def split_label(label: str) -> tuple[str, str]:
    """Inverse of layer_label: (layer, precision)."""
    layer, _, precision = label.partition("@")
    return layer, precision or "bf16"


def _precision_of(row: dict) -> str:
    v = row.get("weight_dtype")
    return v if isinstance(v, str) else "bf16"


def point_settings(s) -> dict:
    """The microbench settings a point's measurement depends on (all but NOT_POINT_SETTINGS)."""
    return {k: v for k, v in dataclasses.asdict(s).items() if k not in NOT_POINT_SETTINGS}


def _differences(then: dict, now: dict) -> str:
    keys = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
    return "; ".join(f"microbench.{k}: {then.get(k)!r} then, {now.get(k)!r} now" for k in keys)


@dataclass
class PointStore:
    """Finished points {(model, layer, batch): row} and their stage rows; `out`: the folder they
    are written to as they come (None: kept in memory only)."""

    settings: dict
    out: Path | None = None
    points: dict = field(default_factory=dict)
    stages: list = field(default_factory=list)

    @property
    def source(self) -> str:
        return str(self.out / POINTS_FILE) if self.out is not None else "memory"

    @classmethod
    def open(cls, out, s) -> "PointStore":
        """The store of folder `out` for settings `s`, with the points a stopped run wrote there
        (and their stage rows); a ConfigError naming the file and the differing settings if
        any was measured with other settings, a DataError if the file is not a points table."""
        import pandas as pd

        from deamoe.errors import ConfigError, DataError

        store = cls(point_settings(s), Path(out))
        path = store.out / POINTS_FILE
        if not path.is_file():
            return store

        def parsed(table: Path, parse, what: str):
            """parse(rows) of CSV `table`; a DataError naming it when it is no such table."""
            try:
                return parse(pd.read_csv(table, dtype=TEXT_COLUMNS).to_dict("records"))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise DataError(f"{table}: not a microbench {what} table ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}); delete it to "
                                "measure its points again") from None

        rows, keyed, settings = parsed(path, lambda rows: (
            rows, {(r["model"], r["layer"], int(r["batch"])): r for r in rows},
            [json.loads(r["settings"]) for r in rows]), "points")
        other = [then for then in settings if then != store.settings]
        if other:
            raise ConfigError(f"{path}: {len(other)} of its {len(rows)} points were measured "
                              f"with other settings ({_differences(other[0], store.settings)}); "
                              "delete it (or give another --out) to measure them again")
        store.points = {k: {c: v for c, v in r.items() if c != "settings"}
                        for k, r in keyed.items()}
        if (store.out / "stages.csv").is_file():
            # stages.csv names a layer by its shape's kind (a checkpoint's ffn_type)
            done = {(m, FFN_TYPES.get(split_label(layer)[0]), b, split_label(layer)[1])
                    for m, layer, b in store.points}
            # checked as the points are: a malformed one is named before any GPU work
            store.stages = parsed(store.out / "stages.csv", lambda stages: [
                r for r in stages if (r["model"], r["kind"], int(r["batch"]), _precision_of(r)) in done],
                "stages")
        return store

    def add(self, point: dict, stage_rows: list[dict]) -> None:
        """A finished point (its model, layer, batch and row) and its stage rows; written out at
        once where the store has a folder."""
        self.points[(point["model"], point["layer"], point["batch"])] = point
        self.stages += stage_rows
        if self.out is not None:
            self.write()

    def write(self) -> None:
        import pandas as pd

        from deamoe.io import write_csv

        text = json.dumps(self.settings, sort_keys=True)
        write_csv(self.out / POINTS_FILE,
                  pd.DataFrame([{**p, "settings": text} for p in self.points.values()]))
        if self.stages:
            write_csv(self.out / "stages.csv", pd.DataFrame(self.stages))
        table = self.table()
        if table:
            write_csv(self.out / "microbench.csv", pd.DataFrame(table))
        fp8 = self.fp8_table()
        if fp8:
            write_csv(self.out / FP8_FILE, pd.DataFrame(fp8))

    def table(self, models=None, batches=None, precision: str = "bf16") -> list[dict]:
        """microbench.csv: one row per (model, batch) whose baseline and DeaMoE points are done
        (with the library reference where measured), in the order the points came; only
        `models` / `batches` where given.  precision: the rows of that weight precision."""
        base, dea = layer_label("baseline", precision), layer_label("deamoe", precision)
        pairs = dict.fromkeys((m, b) for m, _, b in self.points)
        return [pair_row(self.points[(m, base, b)], self.points[(m, dea, b)],
                         self.points.get((m, "torch", b)) if precision == "bf16" else None)
                for m, b in pairs
                if (m, base, b) in self.points and (m, dea, b) in self.points
                and (models is None or m in models) and (batches is None or b in batches)]

    def fp8_table(self, models=None, batches=None) -> list[dict]:
        """microbench_fp8.csv: table()'s rows of every FP8 precision measured (`weight_dtype`)."""
        precisions = dict.fromkeys(split_label(layer)[1] for _, layer, _ in self.points)
        return [row for p in precisions if p != "bf16"
                for row in self.table(models, batches, p)]

    def progress_line(self, point: dict, where: str) -> str:
        """One line on a finished point: its best time and fraction of the read roofline, and
        for DeaMoE its speedup over the baseline point of the same batch as a fraction of the
        ideal (the ratio of the two layers' bytes)."""
        head = f"{point['model']} {point['layer']} batch {point['batch']}"
        us, peak = point["us"], point["peak_read_tbps"]
        if not us == us:  # NaN: no knob set ran
            return f"{head}: failed  [{where}]"
        text = f"{head}: best {us:.1f} us"
        frac = point["bytes"] / us / 1e6 / peak
        text += f", {100 * frac:.1f}% of the read roofline" if frac == frac else ""
        layer, precision = split_label(point["layer"])
        base = self.points.get((point["model"], layer_label("baseline", precision),
                                point["batch"]))
        if layer == "deamoe" and base is not None and base["us"] == base["us"]:
            speedup, ideal = base["us"] / us, base["bytes"] / point["bytes"]
            text += f"; speedup {speedup:.3f} = {speedup / ideal:.3f} of ideal"
        skipped = point.get("smem_skipped") or 0
        text += f"; {skipped} knob sets over the shared memory skipped" if skipped else ""
        return f"{text}  [{where}]"


def pair_row(b: dict, d: dict, r: dict | None) -> dict:
    """The microbench.csv row of one (model, batch) from its baseline, DeaMoE and (or None)
    library-reference points; each side's fraction of the roofline against the roofline of the
    call that measured it."""
    from deamoe import paper
    from deamoe.bench.shared import shared_columns
    from deamoe.shapes import table1_row

    model, batch, nan = b["model"], int(b["batch"]), float("nan")
    bt, dt = b["us"], d["us"]
    ideal = b["bytes"] / d["bytes"]
    precision = split_label(b.get("layer", "baseline"))[1]
    return {
        "model": model, "batch": batch,
        **({"weight_dtype": precision} if precision != "bf16" else {}),
        "baseline_us": bt, "deamoe_us": dt, "speedup": bt / dt,
        "ideal_speedup": ideal, "speedup_over_ideal": (bt / dt) / ideal,
        "baseline_bytes": b["bytes"], "deamoe_bytes": d["bytes"],
        "baseline_tbps": b["bytes"] / bt / 1e6, "deamoe_tbps": d["bytes"] / dt / 1e6,
        "peak_read_tbps": b["peak_read_tbps"],
        "baseline_frac_peak": b["bytes"] / bt / 1e6 / b["peak_read_tbps"],
        "deamoe_frac_peak": d["bytes"] / dt / 1e6 / d["peak_read_tbps"],
        "torch_grouped_us": r["us"] if r is not None else nan,
        "vllm_h200_us": (paper.VLLM_H200_US.get(model, {}).get(batch, nan)
                         if precision == "bf16" else nan),  # the quoted times are bf16's
        # the baseline timed as vLLM's fused_moe is: from the router logits
        "baseline_from_logits_us": b.get("from_logits_us", nan),
        "baseline_experts": b["experts"], "deamoe_experts": d["experts"],
        "baseline_tile": b["tile"], "deamoe_tile": d["tile"],
        "baseline_p10_us": b.get("p10_us"), "baseline_p90_us": b.get("p90_us"),
        "deamoe_p10_us": d.get("p10_us"), "deamoe_p90_us": d.get("p90_us"),
        "copies": b["copies"],
        "baseline_layers_per_graph": b["layers"],
        "deamoe_layers_per_graph": d["layers"],
        "routing": b["routing"],
        **shared_columns(table1_row(model), _stream(b), _stream(d)),
        "gpu": b["gpu"], "torch": b["torch"], "triton": b["triton"],
        "date": b["date"], "git_sha": b["git_sha"],
    }


def _stream(point: dict) -> dict:
    """The point's shared-experts schedule as shared_columns reads it (a points table read back
    holds NaN where there was none)."""
    v = point.get("shared_stream")
    return {"shared_stream": None if v is None or (isinstance(v, float) and math.isnan(v))
            else bool(v)}
