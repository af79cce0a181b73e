"""End to end on the CPU: `serve` starts a real vLLM server for a checkpoint, drives the
configured concurrency levels, stops it; `serve-tables` then writes tpot.csv / slo.csv.

The served runs are the session's tiny pipeline run (tests/workflow/reduced.yaml: both
pre-trained checkpoints, concurrency 1 and 2, 8 output tokens per request), which starts the same
two vLLM servers through the same command; this reads its results instead of starting two more."""

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
def test_serve_and_tables(tiny_pipeline, tmp_path):
    served = tiny_pipeline / "results" / "serve"
    reduced = yaml.safe_load((tiny_pipeline / "tests" / "workflow" / "reduced.yaml").read_text())
    levels, output_len = reduced["serve"]["concurrency"], reduced["serve"]["output_len"]
    assert levels == [1, 2] and output_len == 8
    for model in ("deamoe", "baseline"):
        for c in levels:
            res = json.loads((served / model / f"c{c}.json").read_text())
            assert res["raw"]["completed"] == res["num_requests"] and res["raw"]["failed"] == 0
            assert res["raw"]["total_output_tokens"] == output_len * res["num_requests"]  # EOS ignored
            assert res["tpot_server_mean_ms"] > 0 and res["output_tok_s"] > 0
    # the tables again from the same results, under a 1 s budget every level meets
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"profile": "tiny", "serve": {
        **reduced["serve"], "tpot_budgets_ms": [1000.0], "slo_metric": "tpot_server_mean_ms"}}))
    r = deamoe_cli("serve-tables", "--config", str(cfg), "--in", str(served),
                   "--out", str(tmp_path / "tables"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    tpot = pd.read_csv(tmp_path / "tables" / "tpot.csv")
    assert sorted(zip(tpot.model, tpot.concurrency)) == [
        ("baseline", 1), ("baseline", 2), ("deamoe", 1), ("deamoe", 2)]
    slo = pd.read_csv(tmp_path / "tables" / "slo.csv")
    assert slo.loc[0, "deamoe_max_concurrency"] == 2  # a 1 s budget is met everywhere


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
