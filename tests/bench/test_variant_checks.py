"""`bench variants`' checks before any GPU work (deamoe.bench.variant_checks): the launch rules
they mirror refuse no tile set the kernels' own helpers make, nor any committed pick."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from deamoe.bench.variant_checks import launch_misfit
from deamoe.decode.knobs import fit_knobs, make_tiles, parse_knobs
from deamoe.kernels.fp8 import Fp8Format, fit_tiles, with_qout, with_qscale
from deamoe.shapes import table1_row

MEASURED = Path(__file__).resolve().parents[2] / "reports" / "measured" / "h200"
MODELS = ("Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B")


def _layers():
    for model in MODELS:
        yield table1_row(model).baseline
        yield table1_row(model).deamoe


@pytest.mark.parametrize("precision", ["fp8", "fp8-w8a8"])
def test_the_committed_bf16_picks_fitted_are_taken(precision):
    fmt = Fp8Format.of(precision)
    mb = pd.read_csv(MEASURED / "microbench.csv")
    for _, row in mb.iterrows():
        for shape in (table1_row(row.model).baseline, table1_row(row.model).deamoe):
            text = row.baseline_tile if shape.kind == "moe" else row.deamoe_tile
            picked = parse_knobs(text)
            assert launch_misfit(shape, make_tiles(shape, picked), None) is None
            fitted = make_tiles(shape, fit_knobs(shape, picked, fmt))
            assert fitted == fit_tiles(make_tiles(shape, picked), fmt)  # as TilePicks.tiles
            assert launch_misfit(shape, fitted, fmt) is None, (row.model, row.batch, text)


def test_the_committed_fp8_picks_are_taken():
    mb = pd.read_csv(MEASURED / "microbench_fp8.csv")
    for _, row in mb.iterrows():
        fmt = Fp8Format.of(row.weight_dtype)
        for shape in (table1_row(row.model).baseline, table1_row(row.model).deamoe):
            text = row.baseline_tile if shape.kind == "moe" else row.deamoe_tile
            assert launch_misfit(shape, make_tiles(shape, parse_knobs(text)), fmt) is None, text


@pytest.mark.parametrize("group", [None, 64, 32])
def test_the_w8a8_stored_outputs_the_kernels_make_are_taken(group):
    fmt = Fp8Format.of("fp8-w8a8")
    for shape in _layers():
        tiles = fit_tiles(make_tiles(shape, {}), fmt)
        assert launch_misfit(shape, with_qout(tiles, fmt, group=group), fmt) is None
        assert launch_misfit(shape, with_qscale(tiles), fmt) is None
        # and on weight-only FP8 or bf16 weights, which the launch refuses them on
        assert "fp8-w8a8 weights only" in launch_misfit(shape, with_qscale(tiles), Fp8Format.of("fp8"))
        assert "not bf16" in launch_misfit(shape, with_qout(tiles, fmt, group=group), None)
