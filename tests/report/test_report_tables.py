"""Figures 4/5 and the model-level decode table: speedups from the measured times."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from deamoe.report import figures, tables

COMMITTED = Path(__file__).resolve().parents[2] / "reports" / "measured" / "h200"


@pytest.mark.parametrize("value", ["5.0", ""])
def test_speedups_come_from_the_times_not_the_tables_own_column(tmp_path, value):
    """A committed table's `speedup` column, edited or stale (5.0 beside times of 0.94x) or
    empty, was shown as the row's speedup, drawn in the figure and read by the headline."""
    measured = tmp_path / "h200"
    measured.mkdir()
    (tmp_path / "results").mkdir()
    for name in ("microbench.csv", "decode_tpot.csv"):
        frame = pd.read_csv(COMMITTED / name, dtype=str, keep_default_na=False)
        frame.loc[0, "speedup"] = value
        frame.to_csv(measured / name, index=False)
    shutil.copy(COMMITTED / "read_sizes.csv", measured)
    art = tables.figure45(tmp_path / "results", measured, None)
    first = pd.read_csv(COMMITTED / "microbench.csv").iloc[0]
    row = art.table[(art.table["model"] == first["model"]) & (art.table["batch"] == first["batch"])].iloc[0]
    assert row["speedup"] == pytest.approx(first["baseline_us"] / first["deamoe_us"])
    drawn = figures.figure45(art).axes[0].get_lines()  # Baseline-7B's panel: the first row's model
    ours = next(line for line in drawn if line.get_label().startswith("reproduced"))
    assert ours.get_ydata()[0] == pytest.approx(first["baseline_us"] / first["deamoe_us"])
    decode = tables.decode_tpot(tmp_path / "results", measured, None).table
    want = pd.read_csv(COMMITTED / "decode_tpot.csv").iloc[0]
    assert decode.iloc[0]["speedup"] == pytest.approx(want["baseline_tpot_ms"] / want["deamoe_tpot_ms"])
