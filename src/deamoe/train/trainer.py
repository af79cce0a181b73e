"""One training loop for CPU and GPU, one process or torchrun + FSDP2.

AdamW with linear warm-up and cosine decay, gradient accumulation, bf16 autocast on CUDA,
gradient clipping.  Every `train.checkpoint_every` steps the whole state (model, optimiser, step,
log rows) is written atomically to OUT/state/resume.pt; a restarted run picks it up and, because
each step's batch is a function of (seed, step) only, ends exactly where an uninterrupted run
ends (bit-for-bit on the CPU).  Outputs: OUT/log.csv (one row per step), OUT/summary.json and
OUT/checkpoint/ (Hugging Face format: safetensors, config, tokenizer).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from deamoe.errors import DeaMoEError
from deamoe.io import atomic_dir, atomic_path, stops_deferred, write_json
from deamoe.train import parallel
from deamoe.train.data import TokenData, corpus_fields
from deamoe.train.runs import RunSpec, model_config, train_flops_per_token
from deamoe.train.settings import Settings
from deamoe.train.steplog import LOG_COLUMNS, StepLog

H200_DENSE_BF16_TFLOPS = 794.0  # measured 8192^3 bf16 matmul on the lent H200 (docs/training-h200.md)


def lr_at(step: int, t, steps: int) -> float:
    """Linear warm-up to train.lr, then cosine decay to lr * min_lr_ratio at the last step."""
    if t.warmup_steps and step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(steps - 1 - t.warmup_steps, 1)
    progress = min(max(progress, 0.0), 1.0)
    floor = t.lr * t.min_lr_ratio
    return floor + (t.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def _fingerprint(config_dict: dict, settings: Settings, spec: RunSpec, data: TokenData) -> dict:
    t = settings.train
    return {
        "model": {k: v for k, v in sorted(config_dict.items()) if not k.startswith("_") and k not in ("transformers_version", "dtype", "torch_dtype")},
        "train": {k: getattr(t, k) for k in ("seq_len", "batch_size", "lr", "min_lr_ratio", "warmup_steps",
                                             "weight_decay", "beta1", "beta2", "grad_clip", "seed")},
        "steps": spec.steps,
        "data_sha256": data.meta.get("train_sha256"),
    }


def build_optimizer(model, t):
    """AdamW over the model's parameters with the train section `t`'s settings."""
    import torch

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # Only 1-D parameters (norm gains) skip weight decay; expert matrices are ordinary weights.
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # One fused kernel per step on a single GPU; FSDP2's sharded (DTensor) parameters and the
    # CPU use the default (foreach) implementation.
    fused = all(p.is_cuda for p in decay + no_decay) and not any(
        hasattr(p, "full_tensor") for p in decay + no_decay)
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=1e-8, fused=fused or None)


def _state_dicts(model, opt, d):
    if d.world == 1:
        return model.state_dict(), opt.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _load_state_dicts(model, opt, msd, osd, d):
    if d.world == 1:
        model.load_state_dict(msd)
        opt.load_state_dict(osd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd,
                   options=StateDictOptions(full_state_dict=True))


def _save_state(path: Path, model, opt, step, rows, fingerprint, d) -> None:
    import torch

    msd, osd = _state_dicts(model, opt, d)
    if d.main:
        # through a Python file: a full disk is then ENOSPC (named by atomic_path), where torch's own
        # writer says only "unexpected pos" (a fault of the program, exit status 1).  A stop waits
        # for the state to be written: raised inside torch's call to f.write, it read as that error
        with stops_deferred(), atomic_path(path) as tmp, open(tmp, "wb") as f:
            torch.save({"step": step, "model": msd, "optimizer": osd, "rows": rows,
                        "fingerprint": fingerprint, "world": d.world}, f)
    if d.world > 1:
        import torch.distributed as dist

        dist.barrier()


def _resume(path: Path, model, opt, fingerprint, d) -> tuple[int, list[dict]]:
    import torch

    if not path.is_file():
        return 0, []
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise DeaMoEError(f"resume state {path} is unreadable ({type(exc).__name__}); delete the folder "
                          f"{path.parent} to start this run over") from None
    if not isinstance(state, dict) or state.get("fingerprint") != fingerprint:
        saved = (state.get("fingerprint") if isinstance(state, dict) else None) or {}
        diff = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
        raise DeaMoEError(
            f"resume state {path} was written by another configuration (differs in: {', '.join(diff)}); "
            f"delete the folder {path.parent} to start this run over with the new settings, "
            "or use another --out"
        )
    _load_state_dicts(model, opt, state["model"], state["optimizer"], d)
    if d.main:
        print(f"resumed from step {int(state['step'])} (checkpoint {path})", file=sys.stderr, flush=True)
    return int(state["step"]), list(state["rows"])


def _write_log(path: Path, rows: list[dict]) -> None:
    import csv

    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=LOG_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _autocast(device, settings: Settings):
    import torch

    if device.type == "cuda" and settings.train.bf16:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def micro_loss(model, x, y, cfg):
    """(cross-entropy, balance loss) of one micro-batch: the model's own LM loss (lm_loss)."""
    import torch

    ce = model(input_ids=x, targets=y).loss
    aux = model.aux_loss() if (model.training and cfg.load_balance == "aux_loss") else torch.zeros((), device=x.device)
    return ce, aux


def evaluate(model, data: TokenData, settings: Settings, cfg, device) -> float:
    import torch

    t = settings.train
    model.eval()
    total, n = torch.zeros((), dtype=torch.float64, device=device), 0
    with torch.no_grad():
        for x, y in data.val_batches(t.eval_batches, t.micro_batch_size, t.seq_len):
            with _autocast(device, settings):
                ce, _ = micro_loss(model, x.to(device), y.to(device), cfg)
            total += ce.double() * x.shape[0]
            n += x.shape[0]
    model.train()
    if not n:  # never a held-out loss of 0.0
        raise DeaMoEError(f"{data.directory}/val.bin yields no held-out batch (train.eval_batches="
                          f"{t.eval_batches}, train.seq_len={t.seq_len})")
    return float(total) / n


def build(settings: Settings, cfg, d):
    """The model (compiled and sharded as the settings ask) and its optimiser."""
    import torch

    from deamoe.model import DeaMoEForCausalLM

    t = settings.train
    torch.manual_seed(t.seed)
    model = DeaMoEForCausalLM(cfg).to(d.device)  # built identically on every rank, then sharded
    if t.compile:
        model.compile_layers()
    if d.world > 1:
        parallel.shard(model, bf16=t.bf16 and d.device.type == "cuda")
    model.train()
    return model, build_optimizer(model, t)


def train_step(model, opt, data: TokenData, settings: Settings, cfg, d, step: int, lr: float, mark=None):
    """One optimiser step over this rank's micro-batches; returns the step's numbers (steplog.VALUES)
    as a device tensor, averaged over ranks, without reading them on the host.  mark(stage), when
    given, is called as each stage ends ("forward", "backward", "optimizer"; a benchmark records
    events there)."""
    import torch

    mark = mark or (lambda stage: None)
    t = settings.train
    per_rank = t.batch_size // d.world
    accum = per_rank // t.micro_batch_size
    for group in opt.param_groups:
        group["lr"] = lr
    ce_sum = aux_sum = torch.zeros((), device=d.device)
    for a in range(accum):
        lo = d.rank * per_rank + a * t.micro_batch_size
        x, y = data.train_batch(step, t.seed, t.batch_size, t.seq_len, slice(lo, lo + t.micro_batch_size))
        x, y = x.to(d.device, non_blocking=True), y.to(d.device, non_blocking=True)
        with _autocast(d.device, settings):
            ce, aux = micro_loss(model, x, y, cfg)
            loss = (ce + cfg.aux_loss_coef * aux) / accum if cfg.load_balance == "aux_loss" else ce / accum
        mark("forward")
        loss.backward()
        mark("backward")
        ce_sum = ce_sum + ce.detach().float()
        aux_sum = aux_sum + aux.detach().float()
    stats = model.routing_stats()  # of the last micro-batch
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip if t.grad_clip > 0 else float("inf"))
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if cfg.load_balance == "bias":
        model.update_balance_bias()
        parallel.sync_buffers(model, d)
    mark("optimizer")
    nan = torch.full((), float("nan"), device=d.device)
    values = torch.stack([ce_sum / accum, aux_sum / accum, grad_norm.float(),
                          stats.get("mean_distinct_departments", nan).float(), stats.get("max_load_over_mean", nan).float()])
    return parallel.all_mean_tensor(values, d)


def _check_batch(t, d) -> None:
    per_rank = t.batch_size // d.world
    if t.batch_size % d.world or per_rank % t.micro_batch_size:
        raise DeaMoEError(
            f"train.batch_size={t.batch_size} must split into {d.world} ranks x whole micro-batches of "
            f"train.micro_batch_size={t.micro_batch_size}"
        )


def _preflight(t, spec: RunSpec, data: TokenData, cfg, out: Path, d) -> None:
    """Every check that can fail, before the first step rather than after the last: the run
    folder's outputs (absent, or this run's own), the schedule, one batch of each split, and the
    model with its optimiser state against the device's memory."""
    import torch

    from deamoe.io import check_outputs
    from deamoe.memory import check_fits
    from deamoe.model import DeaMoEForCausalLM
    from deamoe.readers import read_run_summary

    check_outputs(files=[out / "log.csv", out / "summary.json", out / "state" / "resume.pt"],
                  dirs=[out / "checkpoint"], folders=[out])
    if (out / "summary.json").is_file():
        other = read_run_summary(out / "summary.json", whole=False).get("run")
        if other not in (None, spec.name):
            raise DeaMoEError(f"{out} holds the results of run {other} ({out / 'summary.json'}); "
                              f"give run {spec.name} another --out")
    if t.warmup_steps >= spec.steps:
        raise DeaMoEError(f"train.warmup_steps={t.warmup_steps} must be less than the {spec.steps} steps "
                          f"of run {spec.name}")
    data.train_batch(0, t.seed, t.batch_size, t.seq_len, slice(0, 1))  # each raises, naming its shard,
    next(data.val_batches(t.eval_batches, t.micro_batch_size, t.seq_len))  # when too short for one
    with torch.device("meta"):  # counts the parameters without allocating them
        n_params = sum(p.numel() for p in DeaMoEForCausalLM(cfg).parameters())
    # float32 weights, gradients and AdamW's two moments (sharded over the ranks), and one
    # micro-batch's float32 logits
    need = 16 * n_params / d.world + 4 * t.micro_batch_size * t.seq_len * cfg.vocab_size
    check_fits(need, f"run {spec.name} ({n_params:,} parameters)",
               "model.hidden_size, model.num_hidden_layers, the FFN shape, data.vocab_size, "
               "train.micro_batch_size x train.seq_len", str(d.device))


def train_run(settings: Settings, spec: RunSpec, data_dir, out_dir, stop_after: int | None = None,
              progress: bool = True, max_seconds: float = 0.0) -> dict | None:
    """Train one run; returns its summary (None when stopped early by `stop_after`).

    max_seconds > 0 ends training after that much wall time (a time-boxed GPU measurement):
    the summary then records `stopped_early` and the steps actually done.
    """
    import torch
    from tqdm import tqdm

    from deamoe.train import tokenizer as toklib

    # The run's seed (initialisation and batch order) and its size's learning rate
    settings = dataclasses.replace(settings, train=dataclasses.replace(
        settings.train, seed=spec.seed, lr=spec.lr or settings.train.lr))
    t = settings.train
    out = Path(out_dir)
    d = parallel.setup(t.device)
    if t.threads:
        torch.set_num_threads(t.threads)
    if d.device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for what autocast leaves in float32
    data = TokenData.open(data_dir)
    tok = toklib.load(Path(data_dir) / "tokenizer", data.meta["vocab_size"])
    _check_batch(t, d)
    cfg = model_config(settings, spec, data.meta["vocab_size"])
    _preflight(t, spec, data, cfg, out, d)
    model, opt = build(settings, cfg, d)
    fingerprint = _fingerprint(cfg.to_dict(), settings, spec, data)
    state_path = out / "state" / "resume.pt"
    start, rows = _resume(state_path, model, opt, fingerprint, d)
    log = StepLog(spec.name, d.device, t.batch_size * t.seq_len, rows)
    bar = tqdm(total=spec.steps, initial=start, desc=spec.name, disable=not (progress and d.main))
    began, stopped_early = time.perf_counter(), False
    for step in range(start, spec.steps):
        done = step + 1
        log.begin()
        lr = lr_at(step, t, spec.steps)
        log.add(step, lr, train_step(model, opt, data, settings, cfg, d, step, lr))
        bar.update(1)
        saving = (t.checkpoint_every and done % t.checkpoint_every == 0 and done < spec.steps) or done == stop_after
        evaluating = t.eval_every and done % t.eval_every == 0 and done < spec.steps
        if saving or evaluating or done % t.log_every == 0 or done == spec.steps:
            for row in log.flush():
                bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.1e}", refresh=False)
            # every rank stops at the same step
            if max_seconds and parallel.all_mean([float(time.perf_counter() - began > max_seconds)], d)[0] > 0:
                stopped_early = True
                break
        if saving:
            _save_state(state_path, model, opt, done, rows, fingerprint, d)
            if d.main:
                _write_log(out / "log.csv", rows)
        if done == stop_after and done < spec.steps:
            bar.close()
            parallel.teardown(d)
            return None
        if evaluating:
            rows[-1]["val_loss"] = evaluate(model, data, settings, cfg, d.device)
    log.flush()
    bar.close()
    summary = _finish(settings, spec, cfg, model, opt, rows, data, tok, d, out)
    if d.main:
        summary.update(planned_steps=spec.steps, stopped_early=stopped_early,
                       **corpus_fields(data.meta, summary["tokens"]))
        write_json(out / "summary.json", summary)
        # Finished: the resume state has served (a rerun with another config starts afresh).
        state_path.unlink(missing_ok=True)
    parallel.teardown(d)
    return summary


def _finish(settings, spec, cfg, model, opt, rows, data, tok, d, out) -> dict | None:
    """Held-out loss, log, Hugging Face checkpoint and summary (on the main rank; None on the
    others) of a finished run."""
    from deamoe.provenance import provenance

    n_params = sum(p.numel() for p in model.parameters())
    val_loss = evaluate(model, data, settings, cfg, d.device)
    msd, _ = _state_dicts(model, opt, d) if d.world > 1 else (None, None)
    if not d.main:
        return None
    _write_log(out / "log.csv", rows)
    _save_hf(cfg, model if d.world == 1 else None, msd, tok, out / "checkpoint")
    flops_tok = train_flops_per_token(cfg, settings.train.seq_len)
    return _summary(settings, spec, cfg, rows, val_loss, n_params, flops_tok, d, provenance(str(d.device)))


def _save_hf(cfg, model, full_state, tok, path: Path) -> None:
    """Hugging Face checkpoint (safetensors + config + tokenizer + the model's own code, so plain
    transformers loads it with trust_remote_code=True), written then renamed."""
    from deamoe.model import DeaMoEForCausalLM
    from deamoe.model.remote_code import write_remote_code

    if model is None:  # FSDP: rebuild an unsharded CPU copy from the gathered state dict
        model = DeaMoEForCausalLM(cfg)
        model.load_state_dict(full_state)
    with atomic_dir(path) as tmp:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        write_remote_code(tmp)


def _mean(rows, key, n):
    vals = [float(r[key]) for r in rows[-n:] if r.get(key) not in ("", None)]
    return sum(vals) / len(vals) if vals else None


def _summary(settings, spec, cfg, rows, val_loss, n_params, flops_tok, d, prov) -> dict:
    from deamoe.analysis.budget import ffn_params

    t = settings.train
    last_n = min(settings.ablation.last_n, len(rows))  # a run shorter than last_n: all its steps
    timed = rows[min(5, len(rows) - 1):]  # skip warm-up steps (allocator, compilation)
    tok_s = sum(t.batch_size * t.seq_len for _ in timed) / max(sum(r["step_time_s"] for r in timed), 1e-12)
    mfu = None
    if d.device.type == "cuda":
        mfu = flops_tok * tok_s / (H200_DENSE_BF16_TFLOPS * 1e12 * d.world)
    return {
        "run": spec.name, "kind": spec.kind, "ffn_type": spec.ffn_type, **spec.ffn,
        "size": spec.size, "seed": t.seed, "lr": t.lr, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "load_balance": cfg.load_balance,
        "aux_loss_coef": cfg.aux_loss_coef, "init_std": cfg.init_std, "expert_init_scale": cfg.expert_init_scale,
        "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
        "vocab_size": cfg.vocab_size, "params": n_params,
        # the training path: both compute the same function, but a result names the code it came from
        "ffn_impl": cfg.ffn_impl, "compile": t.compile,
        "ffn_params_per_layer": ffn_params(cfg.ffn_shape()),
        "steps": len(rows), "tokens": rows[-1]["tokens"] if rows else 0, "seq_len": t.seq_len,
        "batch_size": t.batch_size, "world_size": d.world,
        "loss_last_n": _mean(rows, "loss", last_n), "last_n": last_n,
        "final_loss": rows[-1]["loss"] if rows else None, "val_loss": val_loss,
        "mean_distinct_departments": _mean(rows, "mean_distinct_departments", last_n),
        "tokens_per_s": tok_s, "train_flops_per_token": flops_tok, "mfu_vs_794tflops": mfu,
        "wall_s": sum(r["step_time_s"] for r in rows),
        **spec.paper, **prov,
    }
