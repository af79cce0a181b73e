"""deamoe.commands.eval: the harness's cache folder (eval.hf_home) is checked before the model
loads: never inside the checkpoint evaluated, nor inside another output written as a whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from deamoe.cli import main
from deamoe.ownership import mark_whole

CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


@pytest.mark.parametrize("where, named", [
    ("ck/hf", "eval.hf_home ck/hf lies inside --checkpoint ck, an input of this command"),
    ("ck", "eval.hf_home ck is --checkpoint ck, an input of this command"),
    ("other/hf", "eval.hf_home=other/hf is or lies inside other, an output a deamoe command wrote as a whole"),
])
def test_the_cache_never_goes_into_a_checkpoint(tmp_path, monkeypatch, capsys, where, named):
    monkeypatch.chdir(tmp_path)
    for folder in ("ck", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text(json.dumps({"ffn_type": "deamoe"}))
        mark_whole(tmp_path / folder)
    doc = yaml.safe_load(CONFIG.read_text())
    doc["eval"]["hf_home"] = where
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    status = main(["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "ev"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and named in err, err
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [".deamoe-output", "config.json"]
    assert not (tmp_path / "other" / "hf").exists() and not (tmp_path / "ev").exists()


def test_a_cache_folder_that_cannot_be_written_is_named_before_the_model_loads(tmp_path, monkeypatch, capsys):
    # a read-only eval.hf_home failed in the harness, after the model was loaded, as the bare
    # OS error of a path the user had not named
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"ffn_type": "deamoe"}))
    (tmp_path / "ro").mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p).name != "ro" and access(p, mode))

    def loaded(*_, **__):
        raise AssertionError("the evaluation started")

    monkeypatch.setattr("deamoe.eval.runner.run_eval", loaded)
    doc = yaml.safe_load(CONFIG.read_text())
    doc["eval"]["hf_home"] = "ro/hf"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    status = main(["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "ev"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "eval.hf_home=ro/hf: ro: cannot write here" in err, err
    assert not (tmp_path / "ev").exists() and not (tmp_path / "ro" / "hf").exists()
