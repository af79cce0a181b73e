"""deamoe.commands.train: the summary commands' outputs are checked against their inputs first."""

from __future__ import annotations

from pathlib import Path

import pytest

from deamoe.cli import main

CONFIG = str(Path(__file__).resolve().parents[2] / "config.yaml")


@pytest.mark.parametrize("out, named", [
    ("p.csv", "--out p.csv is --keep p.csv, an input of this command"),
    ("q.csv", "its curves table curves.csv is --keep's curves table curves.csv, an input of this command"),
])
def test_pretrain_never_writes_over_the_table_it_keeps_rows_from(tmp_path, monkeypatch, capsys, out, named):
    """--keep is read (its rows and the curves.csv beside it): the summary written over it would
    replace the earlier seeds' rows it was given to keep."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for name in ("p.csv", "curves.csv"):
        (tmp_path / name).write_text("earlier rows\n")
    status = main(["pretrain", "--config", CONFIG, "--runs", "runs", "--keep", "p.csv", "--out", out])
    err = capsys.readouterr().err
    assert status == 2 and err.strip().splitlines() == [f"error: {named}; give it another path"], err
    assert {p.name: p.read_text() for p in tmp_path.glob("*.csv")} == dict.fromkeys(
        ("p.csv", "curves.csv"), "earlier rows\n")
