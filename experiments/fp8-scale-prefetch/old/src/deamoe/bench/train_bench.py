"""`python -m deamoe bench train`: training throughput on a CUDA GPU -> OUT/train_throughput.csv.

Three sections, one row each (columns: SECTION_COLUMNS + provenance):
  layer  forward+backward of one FFN layer over `tokens` tokens (bf16 autocast, float32 weights as
         in training), for both layers of the gpu profile's largest size and of Baseline-7B:
         path torch (the layer's own forward), fast (deamoe.model.fast_ffn), fast+compile; beside
         them `grouped_mm` (the layer's grouped GEMMs alone, on balanced groups: what the layer
         cannot beat without a better GEMM) and `dense` (a SwiGLU FFN of the layer's FLOPs: the
         roofline).  tflops counts 3 x forward FLOPs (deamoe.analysis.budget.ffn_flops).
  step   whole training steps of the two pretrain runs of that size: tokens/s, MFU against the
         measured dense bf16 rate, and the step split into forward, backward and optimizer.
  fsdp   the same step under torchrun + FSDP2 (`--parts fsdp` under torchrun with 2 processes).
Batches are random tokens (the throughput of a step does not depend on the text).  `--parts
kernels` breaks the layer section's paths down by kernel (deamoe.bench.train_kernels).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

SECTION_COLUMNS = ["section", "shape", "ffn", "path", "world_size", "tokens", "ms", "tflops",
                   "vs_dense", "tokens_per_s", "mfu", "forward_ms", "backward_ms", "optimizer_ms"]
PATHS = {"torch": ("torch", False), "fast": ("fast", False), "fast+compile": ("fast", True)}
PARTS = ("layer", "step", "fsdp", "kernels")


class RandomTokens:
    """TokenData's train_batch over random tokens: batch `step` is a function of (seed, step)."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def train_batch(self, step, seed, batch_size, seq_len, rows):
        import torch

        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        tokens = torch.randint(0, self.vocab, (batch_size, seq_len + 1), generator=g)[rows]
        x, y = tokens[:, :-1], tokens[:, 1:]
        return (x.pin_memory(), y.pin_memory()) if torch.cuda.is_available() else (x, y)


def _dev() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: the tests' small shapes


class _Mark:
    """A point in time: a CUDA event on the GPU, the host clock on the CPU (synchronous there)."""

    def __init__(self):
        import time

        import torch

        self.ev = torch.cuda.Event(enable_timing=True) if torch.cuda.is_available() else None
        if self.ev is None:
            self.t = time.perf_counter()
        else:
            self.ev.record()

    def ms_until(self, later: "_Mark") -> float:
        if self.ev is None:
            return (later.t - self.t) * 1e3
        later.ev.synchronize()
        return self.ev.elapsed_time(later.ev)


def _time_ms(fn, reps: int = 10, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a = _Mark()
        fn()
        times.append(a.ms_until(_Mark()))
    return statistics.median(times)


def _fwd_bwd(module, x, g):
    import torch

    def run():
        module.zero_grad(set_to_none=True)
        x.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=x.is_cuda):
            out = module(x)
        out.backward(g)
    return run


def _grouped_gemms(shape, tokens: int):
    """fwd+bwd of the layer's grouped GEMMs alone (bf16, balanced groups, SwiGLU between)."""
    import torch
    import torch.nn.functional as F

    from deamoe.model.grouped import grouped_mm
    from deamoe.shapes import DeaMoEShape

    dev, bf = _dev(), torch.bfloat16
    h, f = shape.h, shape.h_ffn

    def stage(rows, groups, d_in, d_out):
        counts = torch.full((groups,), rows // groups, device=dev)
        counts[: rows % groups] += 1
        x = torch.randn(rows, d_in, device=dev, dtype=bf, requires_grad=True)
        w_gu = torch.randn(groups, 2 * d_out, d_in, device=dev, dtype=bf, requires_grad=True)
        w_d = torch.randn(groups, d_in, d_out, device=dev, dtype=bf, requires_grad=True)
        return x, w_gu, w_d, counts

    if isinstance(shape, DeaMoEShape):
        s1 = stage(tokens * shape.k_dept, shape.n_dept, h, f)
        s2 = stage(tokens * shape.k_expert, shape.n_expert, f, f)
    else:
        s1, s2 = None, stage(tokens * shape.k_expert, shape.n_expert, h, f)

    def run():
        outs = []
        x, w_gu, w_d, c = s2
        gu = grouped_mm(x, w_gu, c)
        outs.append(grouped_mm(F.silu(gu[:, :f]) * gu[:, f:], w_d, c))
        if s1 is not None:  # departments: W_g/W_u on each pair, W_d on each pair's sum
            x, w_gu, w_d, c = s1
            outs.append(grouped_mm(x, w_gu, c))
            outs.append(grouped_mm(x[:, :f].contiguous(), w_d, c))
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    return run


def _dense(h: int, width: int, tokens: int):
    import torch

    from deamoe.model.layers import SharedExperts

    ffn = SharedExperts(h, width).to(_dev(), torch.bfloat16)
    x = torch.randn(tokens, h, device=_dev(), dtype=torch.bfloat16, requires_grad=True)
    return _fwd_bwd(ffn, x, torch.randn_like(x))


def layer_fwd_bwd(shape, path: str, tokens: int):
    """One forward+backward of a fresh FFN layer (seed 0) on `path`, over `tokens` random rows."""
    import torch

    from deamoe.model.layers import build_ffn

    impl, compiled = PATHS[path]
    torch.manual_seed(0)
    layer = build_ffn(shape, impl=impl).to(_dev())
    if compiled:
        layer.compile()
    x = torch.randn(tokens, shape.h, device=_dev(), requires_grad=True)
    return _fwd_bwd(layer, x, torch.randn_like(x))


def layer_rows(shapes: list[tuple], tokens: int, paths: list[str], emit, failed) -> None:
    import torch

    from deamoe.analysis.budget import ffn_flops

    for label, shape in shapes:
        flops = 3.0 * ffn_flops(shape) * tokens
        dense_ms = _time_ms(_dense(shape.h, round(ffn_flops(shape) / (6 * shape.h) / 64) * 64, tokens))
        timed = {"dense": dense_ms, "grouped_mm": _time_ms(_grouped_gemms(shape, tokens))}
        for path in paths:
            try:
                timed[path] = _time_ms(layer_fwd_bwd(shape, path, tokens))
            except Exception as exc:
                failed(f"layer {label} {shape.kind} {path}", exc)
        for path, ms in timed.items():
            emit({"section": "layer", "shape": label, "ffn": shape.kind, "path": path, "world_size": 1,
                         "tokens": tokens, "ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1),
                         "vs_dense": round(dense_ms / ms, 3)})
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def kernel_rows(shapes: list[tuple], tokens: int, paths: list[str], emit, failed, reps: int = 5) -> None:
    """One row per kernel of each shape and path, largest first."""
    import torch

    from deamoe.bench.train_kernels import category, profile_kernels

    for label, shape in shapes:
        for path in paths:
            try:
                run = layer_fwd_bwd(shape, path, tokens)
                for _ in range(3):  # warm-up: compilation, autotuning, the allocator
                    run()
                kernels = profile_kernels(run, reps)
            except Exception as exc:
                failed(f"kernels {label} {shape.kind} {path}", exc)
                continue
            total = sum(ms for _, _, ms in kernels) or 1.0
            for name, calls, ms in sorted(kernels, key=lambda k: -k[2]):
                emit({"shape": label, "ffn": shape.kind, "path": path, "category": category(name),
                      "kernel": name[:120], "calls": round(calls / reps, 2), "ms": round(ms / reps, 4),
                      "share": round(ms / total, 4)})
            run = None  # the layer and its activations go before the next path's
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def step_rows(settings, runs: list[str], paths: list[str], section: str, steps: int, d, emit, failed) -> None:
    """Whole training steps of each run and path (random tokens); stage times from a few more."""
    import torch

    from deamoe.train.runs import model_config, run_spec, train_flops_per_token
    from deamoe.train.trainer import build

    vocab = settings.data.vocab_size
    for path in paths:  # path-major: a run cut short by its time limit has each path of both runs
        impl, compiled = PATHS[path]
        for run in runs:
            spec = run_spec(settings, run)
            per_rank = settings.train.batch_size // d.world
            s = dataclasses.replace(
                settings, model=dataclasses.replace(settings.model, ffn_impl=impl),
                train=dataclasses.replace(settings.train, compile=compiled, seed=spec.seed,
                                          micro_batch_size=min(settings.train.micro_batch_size, per_rank)))
            cfg = model_config(s, spec, vocab)
            try:
                model, opt = build(s, cfg, d)
                ms, stages = _time_steps(model, opt, RandomTokens(vocab), s, cfg, d, steps)
                emit(_step_row(ms, stages, s, d, run, spec, path, section,
                               train_flops_per_token(cfg, s.train.seq_len)))
            except Exception as exc:  # the other paths still run; the command exits 1
                failed(f"{section} {run} {path}", exc)
            model = opt = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def _time_steps(model, opt, data, s, cfg, d, steps: int) -> tuple[float, dict[str, list[float]]]:
    """(ms per training step over `steps` timed steps after a warm-up, {stage: [ms, ...]} of
    three more steps split at the trainer's marks)."""
    from deamoe.train.trainer import train_step

    lr = s.train.lr
    for i in range(3):  # warm-up: compilation, allocator
        train_step(model, opt, data, s, cfg, d, i, lr)
    a = _Mark()
    for i in range(steps):
        train_step(model, opt, data, s, cfg, d, 3 + i, lr)
    ms = a.ms_until(_Mark()) / steps
    stages: dict[str, list[float]] = {}
    for i in range(3):
        marks = [("start", _Mark())]
        train_step(model, opt, data, s, cfg, d, 3 + steps + i, lr, mark=lambda stage: marks.append((stage, _Mark())))
        for (_, m0), (stage, m1) in zip(marks, marks[1:]):
            stages.setdefault(stage, []).append(m0.ms_until(m1))
    return ms, stages


def _step_row(ms: float, stages: dict, s, d, run, spec, path, section, flops_tok) -> dict:
    from deamoe.train.trainer import H200_DENSE_BF16_TFLOPS as peak

    tokens = s.train.batch_size * s.train.seq_len
    tok_s = tokens / (ms / 1e3)
    return {"section": section, "shape": run, "ffn": spec.ffn_type, "path": path, "world_size": d.world,
            "tokens": tokens, "ms": round(ms, 2), "tflops": round(flops_tok * tok_s / 1e12 / d.world, 1),
            "tokens_per_s": round(tok_s), "mfu": round(flops_tok * tok_s / (peak * 1e12 * d.world), 4) if d.device.type == "cuda" else None,
            **{f"{k}_ms": round(statistics.median(v), 2) for k, v in stages.items()}}


def choices(flag: str, given: list[str], known: tuple[str, ...]) -> list[str]:
    """`given` if each is one of `known`, else a ConfigError naming the flag and the value."""
    from deamoe.errors import ConfigError

    for g in given or [""]:
        if g not in known:
            raise ConfigError(f"{flag}: {g!r} is not one of {', '.join(known)} (comma-separated)")
    return given


def bench_train(out: Path, settings, parts: list[str], paths: list[str], tokens: int, steps: int) -> int:
    """`settings`: a training config's, checked (its largest pretrain size's layers and runs are
    timed); `parts` and `paths` as checked by `choices` (the CLI does, before it needs a GPU)."""
    import pandas as pd

    from deamoe.bench.train_kernels import KERNEL_COLUMNS
    from deamoe.io import write_csv
    from deamoe.provenance import provenance, version
    from deamoe.shapes import TABLE1
    from deamoe.train import parallel
    from deamoe.train.runs import pretrain_run_names, size

    big = max(settings.pretrain.sizes, key=lambda n: size(settings, n).decoder["hidden_size"])
    z = size(settings, big)
    runs = [r for r in pretrain_run_names(settings, [big]) if r.endswith(f"-s{z.seeds[0]}")]
    d = parallel.setup(_dev())
    rows: list[dict] = []
    prov = provenance(_dev(), triton=version("triton"))
    name = "train_throughput.csv" if "fsdp" not in parts else "train_fsdp_throughput.csv"

    def writer(rows: list[dict], file: str, columns: list[str]):
        def emit(row: dict) -> None:
            """Keep a row and rewrite the table (a run stopped at its time limit keeps what it has)."""
            rows.append(row)
            if d.main:
                print({k: v for k, v in row.items() if v is not None}, flush=True)
                write_csv(Path(out) / file, pd.DataFrame(rows).reindex(columns=columns).assign(
                    **{k: prov[k] for k in ("device", "torch", "triton", "git_sha", "date")}))
        return emit

    emit = writer(rows, name, SECTION_COLUMNS)

    errors: list[str] = []

    def failed(what: str, exc: Exception) -> None:
        import traceback

        traceback.print_exception(exc)
        errors.append(f"{what}: {type(exc).__name__}: {exc}"[:300])

    row7b = TABLE1["Baseline-7B"]
    shapes = [(f"gpu-{big}", z.baseline), (f"gpu-{big}", z.deamoe),
              ("Baseline-7B", row7b.baseline), ("Baseline-7B", row7b.deamoe)]
    if "layer" in parts and d.main:
        layer_rows(shapes, tokens, paths, emit, failed)
    if "kernels" in parts and d.main:
        kernel_rows(shapes[:2], tokens, paths, writer([], "train_layer_kernels.csv", KERNEL_COLUMNS), failed)
    for part in ("step", "fsdp"):
        if part in parts:
            step_rows(settings, runs, paths, part, steps, d, emit, failed)
    if d.main and rows:
        print(pd.DataFrame(rows).reindex(columns=SECTION_COLUMNS).to_string(index=False))
    for e in errors:
        print(f"error: {e}")
    parallel.teardown(d)
    return 1 if errors else 0
