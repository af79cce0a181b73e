"""deamoe.decode.picks: the packaged picks equal the committed table's; nearest measured batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deamoe.decode.picks import PACKAGED, TilePicks, nearest_batch, packaged, shape_key
from deamoe.shapes import table1_row
from deamoe.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "reports" / "measured" / "h200" / "microbench.csv"


def test_packaged_picks_are_the_committed_tables():
    # the table is the one definition; the package file is generated from it
    assert packaged().picks == TilePicks.from_table(TABLE).picks, (
        f"{PACKAGED} differs from {TABLE}: run python -m deamoe.decode.picks "
        "reports/measured/h200/microbench.csv")
    assert json.loads(PACKAGED.read_text())["source"] == "reports/measured/h200/microbench.csv"


def test_nearest_batch_prefers_the_smaller_on_a_tie():
    measured = [4, 8, 16, 24, 64, 96, 128]
    assert [nearest_batch(measured, b) for b in (1, 6, 12, 20, 80, 81, 256)] == \
        [4, 4, 8, 16, 64, 96, 128]


def test_tiles_per_shape_and_batch():
    row = table1_row("Baseline-7B")
    rows = [{"model": "Baseline-7B", "batch": 8, "baseline_tile": "block_m=32",
             "deamoe_tile": "failed"},
            {"model": "Baseline-7B", "batch": 64, "baseline_tile": "split_launches=4",
             "deamoe_tile": "dense_dept_up=1"}]
    picks = TilePicks.from_rows(rows)
    assert picks.tiles(row.baseline, 1).block_m == 32
    assert picks.tiles(row.baseline, 40).split_launches == 4
    assert picks.knobs(row.deamoe, 8) == (64, "dense_dept_up=1")  # 8 failed: 64 is measured
    assert picks.knobs(row.deamoe.replace(operator="gelu"), 8) is None
    assert picks.tiles(table1_row("DeepSeek-V3").baseline, 8).block_m == 16  # defaults
    assert shape_key(row.deamoe) != shape_key(row.deamoe.replace(operator="gelu"))


def test_merged_keeps_own_picks_and_fills_in():
    row = table1_row("Baseline-7B")
    ours = TilePicks.from_rows([{"model": "Baseline-7B", "batch": 8,
                                 "baseline_tile": "block_m=32", "deamoe_tile": "library"}], "a")
    other = TilePicks.from_rows([{"model": "Baseline-7B", "batch": 8,
                                  "baseline_tile": "block_m=64", "deamoe_tile": "dense_dept_up=1"},
                                 {"model": "Baseline-7B", "batch": 16,
                                  "baseline_tile": "block_m=64", "deamoe_tile": "library"}], "b")
    both = ours.merged(other)
    assert both.knobs(row.baseline, 8) == (8, "block_m=32")
    assert both.knobs(row.baseline, 16) == (16, "block_m=64")
    assert both.knobs(row.deamoe, 16) == (8, "dense_dept_up=1")
    assert both.source == "a + b"
    assert TilePicks.from_json(both.to_json()).picks == both.picks


def test_bad_tables_name_the_file(tmp_path):
    with pytest.raises(DataError, match="no.csv"):
        TilePicks.from_table(tmp_path / "no.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("model,batch\nBaseline-7B,4\n")
    with pytest.raises(DataError, match="bad.csv: missing column.*baseline_tile"):
        TilePicks.from_table(bad)


@pytest.mark.parametrize("content, match", [
    (b"", r"empty\.csv: empty file"),
    (b"\xff\xfe\x00", r"empty\.csv:1: not UTF-8"),
    (b"model,batch,baseline_tile,deamoe_tile\nBaseline-7B,four,w13=n64-k64-w4-s4,failed\n",
     r"empty\.csv:2: column batch is 'four'"),
    (b"model,batch,baseline_tile,deamoe_tile\nBaseline-7B,-4,failed,failed\n",
     r"empty\.csv:2: column batch is -4, not a whole number"),
    (b"model,batch,baseline_tile,deamoe_tile\nBaseline-7B,4.5,failed,failed\n",
     r"empty\.csv:2: column batch is 4\.5, not a whole number"),
    (b"model,batch,weight_dtype,baseline_tile,deamoe_tile\nBaseline-7B,4,fp4,failed,failed\n",
     r"empty\.csv:2: column weight_dtype is 'fp4', not one of bf16, fp8, fp8-w8a8"),
    (b"model,batch,weight_dtype,baseline_tile,deamoe_tile\nBaseline-7B,4,,failed,failed\n",
     r"empty\.csv:2: column weight_dtype is nan"),
    (b"model,batch,baseline_tile,deamoe_tile\nGPT-9,4,w13=n64-k64-w4-s4,failed\n",
     r"empty\.csv:2: unknown model 'GPT-9'"),
    (b"model,batch,baseline_tile,deamoe_tile\nBaseline-7B,4,failed,dept_up\n",
     r"empty\.csv:2: deamoe_tile: 'dept_up' is not a knob set"),
    (b"model,batch,baseline_tile,deamoe_tile\nBaseline-7B,4,w13=n64;w9=1,failed\n",
     r"empty\.csv:2: baseline_tile: 'w13=n64;w9=1' is not a knob set"),
])
def test_a_damaged_table_is_named_with_its_line(tmp_path, content, match):
    (tmp_path / "empty.csv").write_bytes(content)
    with pytest.raises(DataError, match=match):
        TilePicks.from_table(tmp_path / "empty.csv")


def test_regenerating_the_packaged_picks_from_a_bad_table_is_one_line(tmp_path, capsys):
    from deamoe.decode.picks import main

    before = PACKAGED.read_bytes()
    (tmp_path / "t.csv").write_text("")
    assert main([str(tmp_path / "t.csv")]) == 2
    assert main([str(tmp_path / "no.csv")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {tmp_path / 't.csv'}: empty file, not a microbench.csv (tile picks)",
                   f"error: tile picks: {tmp_path / 'no.csv'}: no such file"]
    assert PACKAGED.read_bytes() == before


def test_fp8_layers_take_their_precisions_pick_or_the_bf16_one_fitted():
    from deamoe.kernels.fp8 import Fp8Format

    row = table1_row("DeepSeek-V3")
    bf16 = {"model": "DeepSeek-V3", "batch": 8, "deamoe_tile": "dept_up=n64-k256-w4-s3-tma",
            "baseline_tile": "w13=n64-k256-w4-s3;block_m=32"}
    fp8 = {**bf16, "weight_dtype": "fp8", "baseline_tile": "w13=n128-k128-w4-s4;block_m=64"}
    picks = TilePicks.from_rows([bf16, fp8])
    w8a16, w8a8 = Fp8Format(), Fp8Format(activations="fp8")
    assert picks.tiles(row.baseline, 8, w8a16).block_m == 64  # the FP8 table's own pick
    assert picks.tiles(row.baseline, 8).w13.block_k == 256  # bf16 unchanged
    fitted = picks.tiles(row.deamoe, 8, w8a16)  # no FP8 pick of DeaMoE: the bf16 one, fitted
    assert fitted.dept_up.block_k == 128 and fitted.dept_up.tma
    assert picks.tiles(row.baseline, 8, w8a8).block_m == 32  # w8a8 unmeasured: bf16's, fitted
    assert picks.tiles(row.baseline, 8, w8a8).w13.block_k == 128
    assert shape_key(row.baseline, "fp8") != shape_key(row.baseline)
    assert TilePicks.from_json(picks.to_json()).picks == picks.picks
