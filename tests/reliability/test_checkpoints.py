"""Checkpoints load with plain transformers; a damaged one is one line and leaves nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import cli_battery as helpers

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


KINDS = ["config.json not JSON", "weights truncated", "weights missing", "tokenizer not JSON",
         "config.json missing", "bad shape in config"]

# One interpreter does what `python -m deamoe eval` does before it reads a checkpoint -- sets the
# Hugging Face environment from the config, imports torch, transformers and the model package --
# then, per line on stdin, forks a child that runs the command's main() with its own stdout and
# stderr: each case a fresh process as a user starts it (in-process, logging handlers and warnings
# state left by earlier tests can add lines of their own), less ~15 s of imports per case.
EVAL_FORKS = r"""
import json, os, sys, traceback
from deamoe.cli import main
from deamoe.eval.runner import set_hf_environment
from deamoe.settings import load_eval_settings
set_hf_environment(load_eval_settings(sys.argv[1]))
import torch, transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
import deamoe.model
for line in sys.stdin:
    err, argv = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        out = os.open(os.devnull, os.O_WRONLY)
        fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(fd, 2)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.fixture(scope="module")
def damaged_runs(checkpoint, tmp_path_factory):
    """{kind: (exit status, stderr, tree before, tree after)}: `python -m deamoe eval` on each
    damaged copy of the checkpoint, one at a time in one working folder (EVAL_FORKS)."""
    work = tmp_path_factory.mktemp("damaged") / "work"
    work.mkdir()
    helpers.write_config(work / "c.yaml", eval={"tasks": ["piqa"], "limit": 1,  # its data, read first
                                                "data_dir": str(helpers.REPO / "data" / "eval")})
    err, log = work.parent / "stderr.txt", work.parent / "driver.log"
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    argv = ["eval", "--config", "c.yaml", "--checkpoint", "ckpt", "--model", "deamoe", "--out", "res/eval"]
    runs = {}
    with open(log, "w") as driver_log:
        driver = subprocess.Popen([sys.executable, "-c", EVAL_FORKS, "c.yaml"], cwd=work, env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=driver_log)
        try:
            for kind in KINDS:
                shutil.copytree(checkpoint, work / "ckpt")
                _damage(work / "ckpt", kind)
                before = helpers.tree(work)
                driver.stdin.write(json.dumps([str(err), argv]) + "\n")
                driver.stdin.flush()
                status = driver.stdout.readline().strip()
                assert status, f"the eval driver exited ({driver.poll()}):\n{log.read_text()[-3000:]}"
                runs[kind] = (int(status), err.read_text(), before, helpers.tree(work))
                shutil.rmtree(work / "ckpt")
        finally:
            driver.stdin.close()
            driver.wait(timeout=120)
    return runs


@pytest.mark.parametrize("kind", KINDS)
def test_eval_on_a_damaged_checkpoint_is_one_line_and_leaves_no_staging(damaged_runs, kind):
    status, err, before, after = damaged_runs[kind]
    helpers.assert_one_line_error(status, err, "ckpt")
    assert after == before, "a failed command changed the tree"



def test_a_missing_evaluation_file_is_named_before_the_checkpoint_loads(work, failing, checkpoint, monkeypatch):
    """Loading a large checkpoint takes minutes; a data file absent from eval.data_dir was
    named only after it."""
    from deamoe.eval import runner

    def load(*args):
        raise AssertionError("the checkpoint was loaded before the data were checked")

    monkeypatch.setattr(runner, "load_checkpoint", load)
    (work / "empty").mkdir()
    helpers.write_config(work / "c.yaml", eval={"data_dir": "empty"})
    failing(["eval", "--config", "c.yaml", "--checkpoint", checkpoint, "--model", "deamoe", "--out", "e"],
            "empty/", "no such file (an evaluation data file")
