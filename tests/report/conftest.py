"""Small synthetic result files in the documented formats (fixtures only; the real report reads
the stages' real results). Helpers reach the tests as fixtures, so any pytest import mode works."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

PROV = {"git_sha": "abc123def456", "date": "2026-11-29T12:00:00Z", "device": "CPU (x86_64)",
        "python": "3.11.7", "torch": "2.13.0+cpu"}
MODELS = ["DeepSeek-V3", "DeepSeek-V2", "Qwen3-235B-A22B", "Kimi-K2", "Baseline-7B"]
BATCHES = [4, 8, 16, 24, 32, 40, 48, 64, 96, 128]


def _csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)


def write_results(root: Path, *, eval_=True, serve=True, microbench_gpu=False) -> Path:
    """A results/ tree as the stages write it (only the columns the contracts name)."""
    from deamoe.shapes import TABLE1

    res = root / "results"
    (res).mkdir(parents=True, exist_ok=True)
    (res / "config").mkdir()
    (res / "config" / "resolved-0123456789abcdef.yaml").write_text("profile: tiny\n")
    _csv(res / "analysis" / "table1.csv", [
        {"model": r.model, "h": r.baseline.h, "h_ffn": r.baseline.h_ffn,
         "n_expert": r.baseline.n_expert, "k_expert": r.baseline.k_expert,
         "n_dept": r.deamoe.n_dept, "dea_n_expert": r.deamoe.n_expert, "k_dept": r.deamoe.k_dept,
         "dea_k_expert": r.deamoe.k_expert, "flops_ratio": r.paper_flops_ratio + 0.001,
         "params_ratio": r.paper_params_ratio, "paper_flops_ratio": r.paper_flops_ratio,
         "paper_params_ratio": r.paper_params_ratio, "searched_n_dept": 8, "note": "", **PROV}
        for r in TABLE1.values()])
    _csv(res / "analysis" / "loading.csv", [
        {"model": m, "tokens": t, "ratio": 0.5 + 0.1 * np.log2(t) / 9 + 0.01 * i,
         "baseline_bytes": 1e9, "deamoe_bytes": 5e8, **PROV}
        for i, m in enumerate(MODELS) for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)])
    variants = [("No.1", "silu", "identity", "soft"), ("No.2", "rmsnorm", "identity", "soft"),
                ("No.3", "gelu", "identity", "soft"), ("No.4", "none", "identity", "soft"),
                ("No.5", "silu", "random", "soft"), ("No.6", "silu", "identity", "strict")]
    _csv(res / "ablation" / "summary.csv", [
        {"variant": v, "operator": o, "init": i, "dept_topk": d, "loss_last_n": 5.0 + k / 10,
         "steps": 40, "tokens": 81920, "paper_loss": 2.5 + k / 100}
        for k, (v, o, i, d) in enumerate(variants)])
    runs = [f"ablation-no{i}-s0" for i in range(1, 7)] + ["pretrain-tiny-baseline-s0", "pretrain-tiny-deamoe-s0"]
    for k, run in enumerate(runs):
        d = res / "train" / run
        steps = np.arange(1, 41)
        _csv(d / "log.csv", {"step": steps, "tokens": steps * 2048,
                             "loss": 8.0 * np.exp(-steps / 20) + 4 + k / 20, "lr": 1e-3})
        (d / "summary.json").write_text(json.dumps(
            {"run": run, "final_loss": 4.5, "params": 1_500_000, "tokens": 81920,
             "provenance": {**PROV, "profile": "tiny"}}))
    _csv(res / "pretrain" / "summary.csv", [
        {"model": m, "final_loss": 4.5, "val_loss": 4.7, "tokens": 81920, "params": 1_500_000,
         **PROV} for m in ("baseline", "deamoe")])
    # the loss curves each summary stage writes beside its table (what the report draws)
    for stage, names in (("ablation", runs[:6]), ("pretrain", runs[6:])):
        _csv(res / stage / "curves.csv", pd.concat(
            [pd.read_csv(res / "train" / run / "log.csv")[["step", "tokens", "loss"]].assign(run=run)
             for run in names], ignore_index=True))
    if eval_:
        tasks = ["boolq", "piqa", "social_iqa", "hellaswag", "winogrande", "race", "anli_r1",
                 "anli_r2", "anli_r3", "openbookqa"]
        _csv(res / "eval" / "downstream.csv", [
            {"model": m, "task": t, "metric": "acc", "value": 0.5 + j / 100, "stderr": 0.05,
             "n": 20, "paper_value": None, **PROV}
            for m in ("deamoe", "baseline") for j, t in enumerate(tasks)])
        _csv(res / "eval" / "perplexity.csv", [
            {"model": m, "dataset": ds, "word_perplexity": 900.0 + j, "byte_perplexity": 3.0,
             "bits_per_byte": 1.6, "n": 5, "paper_value": None, **PROV}
            for m in ("deamoe", "baseline") for j, ds in enumerate(["ptb", "wikitext103", "wikitext2"])])
    if serve:
        _csv(res / "serve" / "tpot.csv", [
            {"model": m, "concurrency": c, "tpot_mean_ms": (1.0 + c / 32) * (0.9 if m == "deamoe" else 1),
             "tpot_median_ms": 1.0, "tpot_p99_ms": 2.0, "ttft_ms": 10.0, "output_tok_s": 100.0 * c,
             "backend": "vllm-cpu", "device": "CPU (x86_64)"}
            for m in ("baseline", "deamoe") for c in (1, 2, 4, 8)])
        _csv(res / "serve" / "slo.csv", [
            {"tpot_budget_ms": 2.0, "baseline_concurrency": 4, "deamoe_concurrency": 8, "gain": 1.8}])
    mb = res / "microbench"
    mb.mkdir(parents=True, exist_ok=True)
    if microbench_gpu:
        write_microbench(mb, gpu="NVIDIA H200")
    else:
        (mb / "status.json").write_text(json.dumps({"status": "not run", "reason": "no CUDA GPU"}))
    return res


def write_microbench(folder: Path, gpu: str = "NVIDIA H200") -> None:
    rows = []
    for model in ("Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B"):
        for b in BATCHES:
            base, dea = 100.0 + b, 60.0 + b
            rows.append({"model": model, "batch": b, "baseline_us": base, "deamoe_us": dea,
                         "speedup": base / dea, "ideal_speedup": base / dea * 1.05,
                         "baseline_bytes": 1e8, "deamoe_bytes": 6e7, "baseline_tbps": 4.0,
                         "deamoe_tbps": 3.9, "peak_read_tbps": 4.6, "gpu": gpu,
                         "torch": "2.11.0+cu130", "triton": "3.6.0",
                         "date": "2026-11-29T10:00:00Z", "git_sha": "fedcba987654"})
    _csv(folder / "microbench.csv", rows)
    _csv(folder / "decode_tpot.csv", [{"model": "Baseline-7B", "batch": b,
                                       "baseline_tpot_ms": 2.0 + 0.05 * b,
                                       "deamoe_tpot_ms": 1.8 + 0.04 * b, "gpu": gpu}
                                      for b in BATCHES])


@pytest.fixture
def results(tmp_path):
    return write_results(tmp_path)


@pytest.fixture
def measured(tmp_path):
    folder = tmp_path / "measured" / "h200"
    write_microbench(folder)
    return tmp_path / "measured"


@pytest.fixture
def make_results():
    """write_results(root, eval_=..., serve=..., microbench_gpu=...) for tests that vary it."""
    return write_results
