import dataclasses
import json
import math
import subprocess
import sys

import pandas as pd
import pytest
import torch

from deamoe.errors import DeaMoEError
from deamoe.train.runs import run_spec
from deamoe.settings import load_settings
from deamoe.train.trainer import lr_at, train_run


def _settings(tmp_path, make_config, **train):
    return load_settings(make_config(tmp_path, **train))


def test_killed_and_restarted_run_ends_exactly_like_an_uninterrupted_one(tmp_path, make_config, shards):
    s = _settings(tmp_path, make_config, checkpoint_every=2)
    for name in ("ablation-no6-s0", "pretrain-t-baseline-s0"):
        spec = run_spec(s, name)
        full = train_run(s, spec, shards, tmp_path / name / "full", progress=False)
        assert train_run(s, spec, shards, tmp_path / name / "cut", stop_after=3, progress=False) is None
        assert (tmp_path / name / "cut" / "state" / "resume.pt").is_file()
        assert not (tmp_path / name / "cut" / "checkpoint").exists()
        resumed = train_run(s, spec, shards, tmp_path / name / "cut", progress=False)
        a = pd.read_csv(tmp_path / name / "full" / "log.csv")
        b = pd.read_csv(tmp_path / name / "cut" / "log.csv")
        assert list(a["step"]) == list(range(1, 7)) and (a["loss"].values == b["loss"].values).all()
        assert full["val_loss"] == resumed["val_loss"]
        assert not (tmp_path / name / "cut" / "state" / "resume.pt").exists()  # removed once finished


def test_fast_path_resumed_with_batched_log_reads_equals_uninterrupted(tmp_path, make_config, shards):
    """The GPU profiles' path on the CPU: fast FFN, losses read every 4 steps (checkpoints read
    them too): the log has every step and a resumed run ends exactly like an uninterrupted one."""
    s = _settings(tmp_path, make_config, checkpoint_every=2, log_every=4)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, ffn_impl="fast"))
    spec = run_spec(s, "pretrain-t-deamoe-s0")
    full = train_run(s, spec, shards, tmp_path / "full", progress=False)
    assert train_run(s, spec, shards, tmp_path / "cut", stop_after=3, progress=False) is None
    resumed = train_run(s, spec, shards, tmp_path / "cut", progress=False)
    a, b = (pd.read_csv(tmp_path / n / "log.csv") for n in ("full", "cut"))
    assert list(a["step"]) == list(range(1, 7)) and (a["loss"].values == b["loss"].values).all()
    assert full["val_loss"] == resumed["val_loss"]
    assert (full["ffn_impl"], full["compile"]) == ("fast", False)  # the path is in the summary


def test_resume_state_from_another_configuration_is_refused(tmp_path, make_config, shards):
    s = _settings(tmp_path, make_config)
    train_run(s, run_spec(s, "ablation-no1-s0"), shards, tmp_path / "run", stop_after=2, progress=False)
    with pytest.raises(DeaMoEError, match=r"written by another configuration \(differs in: model\)"):
        train_run(s, run_spec(s, "ablation-no3-s0"), shards, tmp_path / "run", progress=False)


def test_final_checkpoint_loads_with_transformers_and_reproduces_val_loss(tmp_path, make_config, shards):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import deamoe.model  # noqa: F401  (registers the Auto classes)
    from deamoe.train.data import TokenData

    s = _settings(tmp_path, make_config)
    summary = train_run(s, run_spec(s, "pretrain-t-deamoe-s0"), shards, tmp_path / "run", progress=False)
    ckpt = tmp_path / "run" / "checkpoint"
    model = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    tok = AutoTokenizer.from_pretrained(ckpt)
    assert len(tok) == model.config.vocab_size and model.config.ffn_type == "deamoe"
    x, y = next(TokenData.open(shards).val_batches(1, 2, s.train.seq_len))
    with torch.no_grad():
        logits = model(input_ids=x).logits
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    assert math.isfinite(ce)
    log = pd.read_csv(tmp_path / "run" / "log.csv")
    assert set(log.columns) >= {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s",
                                "mean_distinct_departments"}
    assert (log["mean_distinct_departments"] <= 2).all() and (log["mean_distinct_departments"] >= 1).all()
    assert summary["tokens"] == 6 * 4 * 16


def test_loss_falls(tmp_path, make_config, shards):
    s = _settings(tmp_path, make_config, steps=40, lr=0.01, warmup_steps=4)
    train_run(s, run_spec(s, "ablation-no1-s0"), shards, tmp_path / "run", progress=False)
    loss = pd.read_csv(tmp_path / "run" / "log.csv")["loss"]
    assert loss.tail(5).mean() < loss.head(3).mean() - 0.5


def test_lr_schedule_warms_up_then_decays_to_the_floor(tmp_path, make_config):
    t = _settings(tmp_path, make_config, lr=1.0, warmup_steps=4, min_lr_ratio=0.1).train
    lrs = [lr_at(i, t, 20) for i in range(20)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:])) and lrs[-1] == pytest.approx(0.1)


def test_ablation_and_pretrain_summaries(tmp_path, make_config, shards):
    config = make_config(tmp_path, steps=3)
    s = load_settings(config)
    for v in ("no1", "no2", "no3", "no4", "no5", "no6"):
        train_run(s, run_spec(s, f"ablation-{v}-s0"), shards, tmp_path / "runs" / f"ablation-{v}-s0", progress=False)
    for m in ("baseline", "deamoe"):
        train_run(s, run_spec(s, f"pretrain-t-{m}-s0"), shards, tmp_path / "runs" / f"pretrain-t-{m}-s0",
                  progress=False)
    from deamoe.cli import main

    assert main(["ablation", "--config", config, "--runs", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "ablation" / "summary.csv")]) == 0
    table = pd.read_csv(tmp_path / "ablation" / "summary.csv")
    assert list(table.columns[:11]) == ["run", "variant", "seed", "size", "operator", "init", "dept_topk",
                                        "loss_last_n", "last_n", "steps", "tokens"]
    assert list(table["paper_loss"]) == [2.504, 2.510, 2.536, 2.508, 2.530, 2.519]
    # a variant is read from the run it was trained as (No.1: the DeaMoE pre-training run when identical)
    assert list(table["trained_as"])[1:] == [f"ablation-no{i}-s0" for i in range(2, 7)]
    assert table["loss_last_n"].iloc[0] == pytest.approx(
        pd.read_csv(tmp_path / "runs" / table["trained_as"].iloc[0] / "log.csv")["loss"].tail(table["last_n"].iloc[0]).mean())
    assert (tmp_path / "ablation" / "curves.csv").is_file()
    assert main(["pretrain", "--config", config, "--runs", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "pretrain" / "summary.csv")]) == 0
    pre = pd.read_csv(tmp_path / "pretrain" / "summary.csv")
    assert list(pre["model"]) == ["baseline", "deamoe"] and (pre["val_loss"] > 0).all()
    assert list(pre["run"]) == ["pretrain-t-baseline-s0", "pretrain-t-deamoe-s0"]
    assert (pre["tokens"] == 3 * 4 * 16).all() and (pre["seed"] == 0).all()
    assert list(pre["ffn_impl"]) == ["torch", "torch"] and not pre["compile"].any()  # the training path
    # a missing run is a one-line error naming it
    assert main(["ablation", "--config", config, "--runs", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "x.csv")]) == 2


def test_fsdp2_on_two_gloo_processes_matches_one_process(tmp_path, make_config, shards):
    """torchrun --nproc_per_node 2 (gloo, FSDP2 fully_shard) vs one process: same global batches."""
    one = make_config(tmp_path / "one", steps=4)
    two = make_config(tmp_path / "two", steps=4, nproc_per_node=2, device="cpu")
    for cfg, out in ((one, "r1"), (two, "r2")):
        proc = subprocess.run([sys.executable, "-m", "deamoe", "train", "--config", cfg, "--run", "ablation-no1-s0",
                               "--data", str(shards), "--out", str(tmp_path / out)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = pd.read_csv(tmp_path / "r1" / "log.csv"), pd.read_csv(tmp_path / "r2" / "log.csv")
    assert (a["loss"] - b["loss"]).abs().max() < 1e-4
    assert json.loads((tmp_path / "r2" / "summary.json").read_text())["world_size"] == 2
    assert (tmp_path / "r2" / "checkpoint" / "model.safetensors").is_file()


def test_more_processes_than_gpus_is_an_error(tmp_path, make_config, shards):
    if torch.cuda.device_count() >= 64:
        pytest.skip("this machine has 64 GPUs")
    cfg = make_config(tmp_path, nproc_per_node=64, device="cuda")
    from deamoe.cli import main

    assert main(["train", "--config", cfg, "--run", "ablation-no1-s0", "--data", str(shards),
                 "--out", str(tmp_path / "r")]) == 2


def test_time_box_stops_early_and_says_so(tmp_path, make_config, shards):
    s = _settings(tmp_path, make_config, steps=500)
    summary = train_run(s, run_spec(s, "ablation-no1-s0"), shards, tmp_path / "run", progress=False,
                        max_seconds=1e-9)
    assert summary["stopped_early"] and summary["planned_steps"] == 500 and summary["steps"] <= 1
    assert (tmp_path / "run" / "checkpoint" / "config.json").is_file()


def test_measurement_tables(tmp_path, make_config, shards):
    from deamoe.train.measure import collect

    s = _settings(tmp_path, make_config)
    for name in ("pretrain-t-baseline-s0", "pretrain-t-deamoe-s0"):
        train_run(s, run_spec(s, name), shards, tmp_path / "runs" / name.split("-")[2], progress=False)
    collect(tmp_path / "runs", tmp_path / "m")
    table = pd.read_csv(tmp_path / "m" / "train_gpu.csv")
    assert set(table["run"]) == {"pretrain-t-baseline-s0", "pretrain-t-deamoe-s0"}
    assert (table["deamoe_over_baseline_step_time"] > 0).all()
