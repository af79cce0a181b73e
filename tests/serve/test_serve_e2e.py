"""End to end on the CPU: `serve` starts a real vLLM server for a tiny checkpoint, drives two
concurrency levels, stops it; `serve-tables` then writes tpot.csv / slo.csv.  ~1-2 min."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

pytest.importorskip("vllm")


def deamoe_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "deamoe", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_serve_and_tables(tiny_checkpoints, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"profile": "tiny", "serve": {
        "concurrency": [1, 4], "input_len": 16, "output_len": 8, "rounds": 2, "min_requests": 4,
        "warmups": 1, "tpot_budgets_ms": [1000.0], "slo_metric": "tpot_server_mean_ms"}}))
    for model, ckpt in (("deamoe", "deamoe"), ("baseline", "moe")):
        r = deamoe_cli("serve", "--config", str(cfg), "--checkpoint", str(tiny_checkpoints[ckpt]),
                       "--model", model, "--out", str(tmp_path / "serve" / model),
                       "--log", str(tmp_path / f"{model}.server.log"), cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        for c in (1, 4):
            res = json.loads((tmp_path / "serve" / model / f"c{c}.json").read_text())
            assert res["raw"]["completed"] == res["num_requests"] and res["raw"]["failed"] == 0
            assert res["raw"]["total_output_tokens"] == 8 * res["num_requests"]  # EOS ignored
            assert res["tpot_server_mean_ms"] > 0 and res["output_tok_s"] > 0
    r = deamoe_cli("serve-tables", "--config", str(cfg), "--in", str(tmp_path / "serve"),
                   "--out", str(tmp_path / "serve"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    tpot = pd.read_csv(tmp_path / "serve" / "tpot.csv")
    assert sorted(zip(tpot.model, tpot.concurrency)) == [
        ("baseline", 1), ("baseline", 4), ("deamoe", 1), ("deamoe", 4)]
    slo = pd.read_csv(tmp_path / "serve" / "slo.csv")
    assert slo.loc[0, "deamoe_max_concurrency"] == 4  # a 1 s budget is met everywhere


@pytest.mark.slow
def test_serve_bad_checkpoint_fails_cleanly(tmp_path):
    """A checkpoint vLLM cannot load: exit status 2, the log tail on stderr, no results."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "deamoe", "vocab_size": 10,
                                                  "architectures": ["DeaMoEForCausalLM"],
                                                  "hidden_size": 7, "num_attention_heads": 2}))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"serve": {"concurrency": [1], "startup_timeout_s": 300}}))
    r = deamoe_cli("serve", "--config", str(cfg), "--checkpoint", str(ckpt), "--model", "deamoe",
                   "--out", str(tmp_path / "serve" / "deamoe"), "--log", str(tmp_path / "s.log"),
                   cwd=tmp_path)
    assert r.returncode == 2
    assert "during startup" in r.stderr and "--- tail of" in r.stderr
    assert not (tmp_path / "serve" / "deamoe").exists()
