"""The report appears whole or not at all: `python -m deamoe report` stopped with Ctrl-C part-way
leaves the earlier report (or none) and no staging folder, and a stop while the report is moved
in waits until it is all there; a user's own files under OUT are kept."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

from deamoe.cli import main
from deamoe.report.build import report_outputs


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def report(results, measured, tmp_path):
    """report(): exit status of `python -m deamoe report` into tmp_path/r (a low dpi: fast)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("profile: tiny\nreport: {dpi: 50}\n")
    argv = ["report", "--config", str(cfg), "--results", str(results), "--measured", str(measured),
            "--out", str(tmp_path / "r")]
    return lambda: main(argv)


def _stop_before_the_figures(monkeypatch):
    """Ctrl-C once the tables are written, before any figure."""
    from deamoe.report import figures

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(figures, "draw_all", interrupted)


def test_a_report_stopped_part_way_leaves_the_earlier_one_whole(report, results, tmp_path, monkeypatch):
    out = tmp_path / "r"
    assert report() == 0
    (out / "tables" / "mine.csv").write_text("the user's own table\n")
    (results / "eval" / "downstream.csv").unlink()  # the next build's Table 2 differs: "not run"
    before, beside = _tree(out), sorted(p.name for p in tmp_path.iterdir())
    _stop_before_the_figures(monkeypatch)
    assert report() == 130  # interrupted
    assert _tree(out) == before  # no new table beside the old figures
    assert sorted(p.name for p in tmp_path.iterdir()) == beside  # no staging folder left


def test_a_first_report_stopped_part_way_leaves_nothing(report, tmp_path, monkeypatch):
    beside = sorted(p.name for p in tmp_path.iterdir())
    _stop_before_the_figures(monkeypatch)
    assert report() == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == beside  # neither r/ nor a staging folder


def test_a_stop_while_the_report_is_moved_in_waits_until_it_is_whole(report, results, tmp_path, monkeypatch):
    from deamoe import io

    out = tmp_path / "r"
    assert report() == 0
    (out / "tables" / "mine.csv").write_text("the user's own table\n")
    (results / "eval" / "downstream.csv").unlink()
    real, sent = io.name_in_marker, []

    def record_then_ctrl_c(path):  # Ctrl-C as the first file moved into r/ is named in its marker
        real(path)
        if out in Path(path).parents and not sent:
            sent.append(path)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(io, "name_in_marker", record_then_ctrl_c)
    # a terminal's Ctrl-C (KeyboardInterrupt), whatever an earlier test in this process left
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = report()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent, "no file was moved into r/ through io.name_in_marker"
    assert status == 130, f"stopped with {status}; SIGINT's handler before the test: {previous!r}"
    assert "**not run**" in (out / "tables" / "table2.md").read_text()
    assert (out / "tables" / "mine.csv").read_text() == "the user's own table\n"
    assert all(path.is_file() for path in report_outputs(out))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.")]  # no staging folder left


def test_a_rebuild_replaces_the_report_and_keeps_a_users_own_files(report, results, tmp_path):
    out = tmp_path / "r"
    assert report() == 0
    (out / "tables" / "mine.csv").write_text("the user's own table\n")
    (out / "notes.md").write_text("my notes\n")
    (results / "eval" / "downstream.csv").unlink()
    assert report() == 0
    assert "**not run**" in (out / "tables" / "table2.md").read_text()
    assert (out / "tables" / "mine.csv").read_text() == "the user's own table\n"
    assert (out / "notes.md").read_text() == "my notes\n"
    assert all(path.is_file() for path in report_outputs(out))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.")]
