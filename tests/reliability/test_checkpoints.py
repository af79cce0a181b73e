"""Checkpoints load with plain transformers; a damaged one is one line and leaves nothing behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

# A fresh interpreter in isolated mode (-I: no PYTHONPATH, no user site, no script folder on
# sys.path) run from an empty folder, with `deamoe` made unimportable: only the checkpoint's own
# files can define the model.
LOAD = r"""
import importlib.abc, json, sys
class NoDeamoe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "deamoe" or name.startswith("deamoe."):
            raise ImportError("deamoe must not be needed to load a checkpoint")
sys.meta_path.insert(0, NoDeamoe())
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
with torch.no_grad():
    logits = model(input_ids=torch.tensor([[1, 5, 9, 200, 3, 7]])).logits
print(json.dumps({"class": type(model).__module__ + "." + type(model).__name__,
                  "deamoe_imported": any(m == "deamoe" or m.startswith("deamoe.") for m in sys.modules),
                  "logits": logits[0, -1, :8].tolist()}))
"""


@pytest.mark.slow  # a fresh interpreter importing torch + transformers: tens of seconds
def test_checkpoint_loads_with_plain_transformers_without_deamoe(checkpoint, tmp_path):
    import os

    import torch

    from deamoe.model import DeaMoEForCausalLM

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HOME"] = str(tmp_path / "hf")  # the remote-code module cache goes here
    proc = subprocess.run([sys.executable, "-I", "-c", LOAD, str(checkpoint)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["deamoe_imported"] is False
    assert out["class"].endswith("modeling_deamoe.DeaMoEForCausalLM")
    assert "transformers_modules" in out["class"]  # the checkpoint's copy, not the package
    model = DeaMoEForCausalLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([[1, 5, 9, 200, 3, 7]])).logits[0, -1, :8]
    assert torch.allclose(torch.tensor(out["logits"]), ref, atol=1e-6)


def test_checkpoint_carries_copies_of_the_package_model_code(checkpoint):
    from deamoe.model.remote_code import AUTO_MAP, MODULES, module_source

    config = json.loads((checkpoint / "config.json").read_text())
    assert config["auto_map"] == AUTO_MAP
    for module, name in MODULES.items():
        text = (checkpoint / f"{name}.py").read_text()
        assert text.endswith(module_source(module))  # the package's module, imports made relative
        assert "from deamoe" not in text and "import deamoe" not in text


def _damage(path, kind):
    if kind == "config.json not JSON":
        (path / "config.json").write_text("{not json")
    elif kind == "weights truncated":
        weights = path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif kind == "weights missing":
        (path / "model.safetensors").unlink()
    elif kind == "tokenizer not JSON":
        (path / "tokenizer.json").write_text("garbage")
    elif kind == "config.json missing":
        (path / "config.json").unlink()
    elif kind == "bad shape in config":
        cfg = json.loads((path / "config.json").read_text())
        cfg["k_dept"] = 99
        (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("kind", ["config.json not JSON", "weights truncated", "weights missing",
                                  "tokenizer not JSON", "config.json missing", "bad shape in config"])
def test_eval_on_a_damaged_checkpoint_is_one_line_and_leaves_no_staging(work, checkpoint, kind):
    """Run as a user runs it, in a fresh process: in-process, logging handlers and warnings
    state left by earlier tests (transformers, lm-eval) can add lines of their own."""
    import importlib.util
    from pathlib import Path

    # this folder's conftest by path: `from conftest import` can find another folder's conftest
    spec = importlib.util.spec_from_file_location("reliability_conftest", Path(__file__).with_name("conftest.py"))
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    assert_one_line_error, tree, write_config = helpers.assert_one_line_error, helpers.tree, helpers.write_config

    damaged = work / "ckpt"
    shutil.copytree(checkpoint, damaged)
    _damage(damaged, kind)
    write_config(work / "c.yaml", eval={"tasks": ["piqa"], "limit": 1})
    before = tree(work)
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "deamoe", "eval", "--config", "c.yaml", "--checkpoint",
                           "ckpt", "--model", "deamoe", "--out", "res/eval"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert_one_line_error(proc.returncode, proc.stderr, "ckpt")
    assert tree(work) == before, "a failed command changed the tree"


import os  # noqa: E402  (used by the damaged-checkpoint test's environment guard)
