"""A committed measurement table with a row given twice, or with no row, is one line naming it.

Every command that reads a table of reports/measured/ through an option (a copy, damaged here)
stops before any work: a point measured twice would be picked or plotted from either row, and
a header without rows crashed the report (IndexError) instead of naming the file.  `bench
import` never writes a table holding a point twice (a folder given twice, or two parts that
both measured a point).
"""

from __future__ import annotations

import shutil

import pytest

from cli_battery import REPO, write_config

MEASURED = REPO / "reports" / "measured"


def _damaged(work, name: str, how: str):
    """A copy of reports/measured/ whose h200/NAME has its first row twice, or no row."""
    shutil.copytree(MEASURED, work / "meas")
    path = work / "meas" / "h200" / name
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines + lines[1:2] if how == "twice" else lines[:1]))
    return path


PICKS = "meas/h200/microbench.csv"
TABLE_COMMANDS = {
    "bench picks-check": ["bench", "picks-check", "o", "--table", PICKS],
    "bench variants": ["bench", "variants", "o", "x:split_launches=2", "Baseline-7B:4", "--table", PICKS],
    "bench trace": ["bench", "trace", "o", "--table", PICKS],
    "bench peer run": ["bench", "peer", "run", "o", "Baseline-7B:4", "--table", PICKS],
    "microbench --tiles-from": ["microbench", "--config", "c.yaml", "--out", "o", "--tiles-from", PICKS],
}


@pytest.mark.parametrize("command", list(TABLE_COMMANDS))
def test_a_tile_picks_table_with_a_row_twice_is_named_with_both_lines(work, failing, command):
    write_config(work / "c.yaml")
    _damaged(work, "microbench.csv", "twice")
    failing(TABLE_COMMANDS[command], f"{PICKS}:32", "model=Baseline-7B, batch=4", "given twice",
            f"{PICKS}:2")


@pytest.mark.parametrize("how, names", [("twice", [":18", "given twice", ":2"]), ("header", ["no rows"])])
def test_a_decode_table_to_merge_into_is_checked(work, failing, how, names):
    write_config(work / "c.yaml")
    _damaged(work, "decode_tpot.csv", how)
    failing(["microbench", "--config", "c.yaml", "--out", "o", "--merge-decode-into",
             "meas/h200/decode_tpot.csv"], "meas/h200/decode_tpot.csv", *names)


POINT_TABLES = ["microbench.csv", "microbench_fp8.csv", "microbench_shared.csv", "decode_tpot.csv"]
# several rows per model and batch: no point of their own, so only a header without rows is wrong
ROW_TABLES = ["vllm_peer.csv", "read_sizes.csv", "train_throughput.csv"]


@pytest.mark.parametrize("name, how", [(n, h) for n in POINT_TABLES for h in ("twice", "header")]
                         + [(n, "header") for n in ROW_TABLES])
def test_the_report_names_a_committed_table_with_a_row_twice_or_none(work, failing, name, how):
    write_config(work / "c.yaml")
    (work / "results").mkdir()
    _damaged(work, name, how)
    failing(["report", "--config", "c.yaml", "--measured", "meas", "--out", "rep"], f"meas/h200/{name}",
            "given twice" if how == "twice" else "no rows")


def test_import_of_a_folder_given_twice_is_refused(work, failing):
    (work / "run").mkdir()
    shutil.copy(MEASURED / "h200" / "microbench.csv", work / "run")
    failing(["bench", "import", "run", "run", "--dest", "dest", "--sha", "abc1234"], "run is given twice")


def test_import_of_two_parts_measuring_one_point_is_refused(work, failing):
    for part in ("a", "b"):
        (work / part).mkdir()
        shutil.copy(MEASURED / "h200" / "decode_tpot.csv", work / part)
    failing(["bench", "import", "a", "b", "--dest", "dest", "--sha", "abc1234"], "b/decode_tpot.csv:2",
            "given twice", "a/decode_tpot.csv:2")


@pytest.mark.parametrize("name, column, value", [("vllm_peer.csv", "us", "0"), ("vllm_peer.csv", "us", "-3"),
                                                 ("read_sizes.csv", "tbps", "0"),
                                                 ("train_throughput.csv", "ms", "-2")])
def test_a_time_or_rate_of_zero_or_below_is_named_with_its_line(work, name, column, value):
    """A time or read rate of 0 or below in a GPU table the report reads: it showed vLLM's speed
    ratio as inf (with a RuntimeWarning) or -213x, a negative layer time as measured."""
    import csv

    from deamoe.errors import DataError
    from deamoe.report.sources import read_csv

    (work / "run").mkdir()
    rows = list(csv.reader((MEASURED / "h200" / name).open()))
    rows[1][rows[0].index(column)] = value
    with (work / "run" / name).open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    with pytest.raises(DataError, match=f"{name}:2: column {column} is .*not a number > 0"):
        read_csv(work / "run" / name)


@pytest.mark.parametrize("name, column, value, shown", [
    ("microbench.csv", "batch", "3.5", "3.5, not a whole number"),
    ("decode_tpot.csv", "batch", "8.5", "8.5, not a whole number"),
    ("quality/small/runs.csv", "seed", "1.5", "1.5, not a whole number"),
    ("microbench.csv", "vllm_h200_us", "0", "0.0, not a number > 0"),
    ("microbench.csv", "baseline_bytes", "-100", "-100.0, not a number > 0"),
    ("microbench_fp8.csv", "peak_read_tbps", "-4.6", "-4.6, not a number > 0"),
    ("quality/small/runs.csv", "val_loss", "-1", "-1.0, not a number > 0"),
    ("quality/small/runs.csv", "tokens", "", "empty or NaN, not a finite number"),
    ("quality/small/runs.csv", "params", "0", "0, not a number > 0"),
    ("quality/ablation/summary.csv", "loss_last_n", "-3.4", "-3.4, not a number > 0"),
])
def test_a_fractional_count_or_a_kernel_tables_other_times_and_bytes_are_checked(work, name, column, value,
                                                                                  shown):
    """A batch of 3.5 was shown as batch 3 (and a seed of 1.5 paired as a seed of its own); a
    vLLM time of 0 stopped the report with 'ZeroDivisionError', naming no file; negative bytes
    were shown as -6.5e-05 % of the read roofline; a held-out loss of -1 was averaged into a
    "within seed noise" verdict, a row without tokens left the tokens axis unsaid."""
    import csv

    from deamoe.errors import DataError
    from deamoe.report.sources import read_csv

    rows = list(csv.reader((MEASURED / "h200" / name).open()))
    rows[1][rows[0].index(column)] = value
    path = work / "meas" / "h200" / name
    path.parent.mkdir(parents=True)
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    with pytest.raises(DataError, match=f"{path.name}:2: column {column} is {shown}"):
        read_csv(path)


def test_import_of_rows_of_two_chips_into_one_table_is_refused(work, failing):
    """Parts run on two machines (an H200 and an H100), or --merge of an H200 run into an H100
    table, made one table of two chips' times: a curve whose speedups cross chips."""
    lines = (MEASURED / "h200" / "decode_tpot.csv").read_text().splitlines(keepends=True)
    h100 = [r.replace("NVIDIA H200", "NVIDIA H100 80GB HBM3") for r in lines[9:]]
    for part, rows in (("a", lines[1:9]), ("b", h100)):
        (work / part).mkdir()
        (work / part / "decode_tpot.csv").write_text(lines[0] + "".join(rows))
    failing(["bench", "import", "a", "b", "--dest", "dest", "--sha", "abc1234"], "decode_tpot.csv would hold rows",
            "'NVIDIA H200' and 'NVIDIA H100 80GB HBM3'")
    assert not (work / "dest").exists()
