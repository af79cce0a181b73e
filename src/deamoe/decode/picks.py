"""The decode kernels' tile picks per layer shape and batch size, from a microbenchmark table.

The microbenchmark's search writes each point's pick into microbench.csv (`baseline_tile`,
`deamoe_tile`: knob names, deamoe.decode.knobs).  `TilePicks` reads those picks keyed by the
layer's shape and answers `tiles(shape, batch)`: the pick of the nearest measured batch (ties go
to the smaller batch, whose BLOCK_M pads less), or the default tiles for a shape the table never
measured.  The vLLM model's FFN op (deamoe.serve.ffn_op) and the model-level decode benchmark
(deamoe.bench.decode) both take their tiles from here.

How an installed package finds the committed table: the table lives in the repository
(reports/measured/h200/microbench.csv), outside the package, so its picks also ship as package
data, `tile_picks.json` next to this module, generated from the table by
    python -m deamoe.decode.picks reports/measured/h200/microbench.csv
(tests/decode/test_picks.py fails when the two differ, so the table stays the one definition).
`packaged()` returns those; `TilePicks.from_table(path)` reads any other microbench.csv.

Picks are per precision as well (the `weight_dtype` column of an FP8 table, microbench_fp8.csv;
absent: bf16).  A layer run with FP8 weights takes its precision's pick, or else the bf16 pick
with each tile's BLOCK_K fitted to the scale blocks (deamoe.kernels.fp8.fit_tiles).
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from deamoe.shapes import DeaMoEShape, MoEShape

PACKAGED = Path(__file__).with_name("tile_picks.json")
# the shape fields a pick depends on: GEMM sizes, routing fan-out and the fused operator
# (the expert initialisation, the soft/strict department rule and the routing weights' scaling
# change no GEMM's shape)
KEY_FIELDS = {"moe": ("h", "h_ffn", "n_expert", "k_expert"),
              "deamoe": ("h", "h_ffn", "n_dept", "n_expert", "k_dept", "k_expert", "operator")}
_NO_PICK = ("failed", "library")  # microbench.csv entries that name no tiles
_COLUMN = {"moe": "baseline_tile", "deamoe": "deamoe_tile"}


def shape_key(shape: MoEShape | DeaMoEShape, precision: str = "bf16") -> tuple:
    """The picks' key of a layer shape (and of a precision other than bf16)."""
    key = (shape.kind, *(getattr(shape, f) for f in KEY_FIELDS[shape.kind]))
    return key if precision == "bf16" else (*key, precision)


def _precision(key: tuple) -> str:
    return key[-1] if len(key) > 1 + len(KEY_FIELDS[key[0]]) else "bf16"


def nearest_batch(measured, batch: int) -> int:
    """The measured batch closest to `batch` (the smaller one on a tie)."""
    return min(measured, key=lambda b: (abs(b - batch), b))


def _check_point(r: dict) -> None:
    """A DataError unless row `r` names a batch of >= 1 tokens and, in a table with a
    weight_dtype column, a known weight precision (its picks are keyed by both)."""
    from deamoe.errors import DataError
    from deamoe.kernels.fp8 import PRECISIONS

    if r["batch"] != int(r["batch"]) or r["batch"] < 1:
        raise DataError(f"column batch is {r['batch']!r}, not a whole number of tokens >= 1")
    precision = r.get("weight_dtype", "bf16")
    if precision not in PRECISIONS:
        raise DataError(f"column weight_dtype is {precision!r}, not one of {', '.join(PRECISIONS)}")


@dataclass(frozen=True)
class TilePicks:
    """{shape key: {batch: knobs name}} with where they came from."""

    picks: dict = field(default_factory=dict)
    source: str = ""

    @classmethod
    def from_rows(cls, rows, source: str = "") -> "TilePicks":
        """From microbench.csv rows ({model, batch, baseline_tile, deamoe_tile}); the model names
        a Table 1 row, whose two layer shapes the picks belong to."""
        from deamoe.shapes import table1_row

        picks: dict = {}
        for r in rows:
            row = table1_row(r["model"])
            precision = r.get("weight_dtype")
            precision = precision if isinstance(precision, str) else "bf16"
            for shape in (row.baseline, row.deamoe):
                name = r.get(_COLUMN[shape.kind])
                if isinstance(name, str) and name not in _NO_PICK:
                    picks.setdefault(shape_key(shape, precision), {})[int(r["batch"])] = name
        return cls(picks, source)

    @classmethod
    def from_table(cls, path) -> "TilePicks":
        """The picks of microbench.csv `path`; a DataError naming the file (missing, empty, not
        a UTF-8 CSV, lacking a column) or its line (a bad batch, model or knob set)."""
        from deamoe.decode.knobs import checked_tiles
        from deamoe.errors import DataError, DeaMoEError, not_a_file
        from deamoe.readers import TableSpec, read_table
        from deamoe.table_specs import POINT
        from deamoe.shapes import table1_row

        path = Path(path)
        if not path.is_file():
            raise DataError(f"tile picks: {path}: {not_a_file(path)}")
        spec = TableSpec(("model", "batch", *_COLUMN.values()), finite=("batch",), key=POINT, rows=True)
        rows = read_table(path, spec, "microbench.csv (tile picks)").to_dict("records")
        for line, r in enumerate(rows, start=2):
            try:
                _check_point(r)
                row = table1_row(str(r["model"]))
                for shape in (row.baseline, row.deamoe):
                    name = r[_COLUMN[shape.kind]]
                    if isinstance(name, str) and name not in _NO_PICK:
                        checked_tiles(shape, name, _COLUMN[shape.kind])
            except DeaMoEError as exc:
                raise DataError(f"{path}:{line}: {exc}") from None
        return cls.from_rows(rows, str(path))

    def merged(self, other: "TilePicks") -> "TilePicks":
        """These picks, with (shape, batch) points they lack filled in from `other`."""
        picks = {k: dict(v) for k, v in other.picks.items()}
        for key, by_batch in self.picks.items():
            picks.setdefault(key, {}).update(by_batch)
        return TilePicks(picks, " + ".join(s for s in (self.source, other.source) if s))

    def knobs(self, shape, batch: int, precision: str = "bf16") -> tuple[int, str] | None:
        """(measured batch used, knobs name) for this shape at `batch`; None: never measured."""
        by_batch = self.picks.get(shape_key(shape, precision))
        if not by_batch:
            return None
        b = nearest_batch(by_batch, batch)
        return b, by_batch[b]

    def tiles(self, shape, batch: int, fp8=None):
        """MoETiles / DeaMoETiles for one decode step of `batch` tokens (defaults if unmeasured).
        fp8: the Fp8Format of the layer's weights: its precision's pick, else the bf16 pick
        fitted to its scale blocks."""
        from deamoe.decode.knobs import make_tiles, parse_knobs
        from deamoe.kernels.fp8 import fit_tiles

        found = self.knobs(shape, batch, fp8.precision) if fp8 is not None else None
        found = found or self.knobs(shape, batch)
        return fit_tiles(make_tiles(shape, parse_knobs(found[1]) if found else {}), fp8)

    def to_json(self) -> dict:
        entries = []
        for key, by_batch in sorted(self.picks.items(), key=lambda kv: str(kv[0])):
            kind, values = key[0], key[1:]
            entry = {"kind": kind, "shape": dict(zip(KEY_FIELDS[kind], values))}
            if _precision(key) != "bf16":
                entry["precision"] = _precision(key)
            entries.append({**entry, "batches": {str(b): by_batch[b] for b in sorted(by_batch)}})
        return {"source": self.source, "picks": entries}

    @classmethod
    def from_json(cls, obj: dict) -> "TilePicks":
        picks = {}
        for e in obj["picks"]:
            key = (e["kind"], *(e["shape"][f] for f in KEY_FIELDS[e["kind"]]))
            key = key if e.get("precision", "bf16") == "bf16" else (*key, e["precision"])
            picks[key] = {int(b): name for b, name in e["batches"].items()}
        return cls(picks, obj.get("source", ""))


@functools.lru_cache(maxsize=1)
def packaged() -> TilePicks:
    """The committed H200 picks shipped with the package (see the module docstring)."""
    return TilePicks.from_json(json.loads(PACKAGED.read_text()))


def main(argv: list[str]) -> int:
    """Regenerate the packaged picks from a microbench.csv (argv: [table])."""
    from deamoe.errors import asked_for_help
    from deamoe.io import write_text

    usage = "usage: python -m deamoe.decode.picks MICROBENCH_CSV"
    if asked_for_help(argv, usage):
        return 0
    if len(argv) != 1:
        print(usage, file=sys.stderr)
        return 2
    from deamoe.errors import run_reporting

    def package() -> None:
        picks = TilePicks.from_table(argv[0])
        write_text(PACKAGED, json.dumps(picks.to_json(), indent=1) + "\n", replace_committed=True)
        print(f"wrote {PACKAGED}: {sum(map(len, picks.picks.values()))} picks, "
              f"{len(picks.picks)} shapes, from {argv[0]}")

    return run_reporting(package)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
