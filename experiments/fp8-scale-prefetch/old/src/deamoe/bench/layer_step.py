"""The timing harness of one MoE layer's decode step (deamoe.decode.step.ffn_step).

Shared by the per-layer microbenchmark and the model-level decode benchmark.  Weights are random
(bf16); several copies ("layers") are rotated inside one CUDA graph so that a replay reads
weights well beyond the 60 MB L2, and the time per layer is the replay time over the copies.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from deamoe.analysis.budget import loaded_expert_bytes, router_params, shared_bytes
from deamoe.decode.step import ffn_step, step_routing
from deamoe.shapes import DeaMoEShape, MoEShape


def free_cuda_cache() -> None:
    """Hand the memory of weights just dropped back to the device before the next shape's."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def layer_bytes(shape: MoEShape | DeaMoEShape, fp8=None) -> int:
    """Bytes of one layer's router + expert weights: bf16 (the parameter count of the budget),
    or with `fp8` (an Fp8Format) its FFN matrices in FP8 with their block scales (the router
    stays bf16)."""
    return (2 * router_params(shape) + shared_bytes(shape, fp8)
            + loaded_expert_bytes(shape, shape.n_expert, getattr(shape, "n_dept", 0), fp8))


def step_bytes(shape: MoEShape | DeaMoEShape, ids: torch.Tensor, fp8=None) -> int:
    """Weight bytes a step must load for this routing: router + distinct experts/departments
    (+ the shared experts, loaded by every step); bf16, or the FFN matrices in `fp8`."""
    experts = int(torch.unique(ids).numel())
    depts = 0
    if isinstance(shape, DeaMoEShape):
        depts = int(torch.unique(ids // shape.experts_per_dept).numel())
    return (2 * router_params(shape) + loaded_expert_bytes(shape, experts, depts, fp8)
            + shared_bytes(shape, fp8))


def library_step(shape, w: dict, x: torch.Tensor) -> torch.Tensor:
    """The baseline layer's decode step from library GEMMs (the microbenchmark's reference):
    the router GEMM and routing as ffn_step runs them, torch_grouped_moe, and the shared
    experts by F.linear."""
    if shape.kind != "moe":
        raise ValueError("library_step: the library reference is the baseline layer's")
    out = torch_grouped_moe(x, w, *step_routing(shape, w, x))
    if not shape.n_shared:
        return out
    g, u, d = w["shared_gate"], w["shared_up"], w["shared_down"]
    return out + F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)


def layer_steps(shape, weights: list[dict], xs: list[torch.Tensor], tiles=None, repeat: int = 1,
                impl: str = "triton", routed: list | None = None,
                logits: list | None = None, shared=None):
    """fn() running the decode step of every layer copy `repeat` times: what one timed graph
    replay holds, shared by the microbenchmark and the bench tools (time it with
    time_fn(fn, replays, repeat * len(weights))).  The step is the product's ffn_step
    (impl "triton"), or library_step (impl "torch": no tiles, routed, logits or shared).  Step j
    (pass j // copies, copy j % copies) reads xs[j % len(xs)]: one input per copy (reused each
    pass) or one per step (its own routing each, StepInputs).  routed / logits: each input's
    (ids, weights) or router logits computed beforehand (ffn_step's `routed` / `logits`, indexed
    as xs), or None to run the router GEMM and the routing inside the step.  shared: the shared
    experts' SharedTiles."""
    for name, per in (("routed", routed), ("logits", logits)):
        if per is not None and len(per) != len(xs):
            raise ValueError(f"layer_steps: {len(per)} {name} for {len(xs)} inputs")
    n = len(weights)

    def run():
        for j in range(repeat * n):
            i = j % len(xs)
            if impl == "torch":
                library_step(shape, weights[j % n], xs[i])
                continue
            ffn_step(shape, weights[j % n], xs[i], tiles=tiles,
                     routed=routed[i] if routed is not None else None,
                     logits=logits[i] if logits is not None else None, shared=shared)
    return run


def router_logits(weights: list[dict], xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each input's router logits (input i on copy i % copies, as layer_steps pairs them),
    computed once: the input of a step timed from logits."""
    with torch.no_grad():
        return [F.linear(x, weights[i % len(weights)]["router"]) for i, x in enumerate(xs)]


@dataclass
class StepInputs:
    """The inputs of a timed graph's layer steps, redrawn for every replay.

    `live` are the tensors the captured graph reads (one per layer step); `draws[d]` holds
    draw d's value of each.  prepare(i), run before replay i and outside its timed events,
    copies draw i % len(draws) into `live`, so every replay routes fresh random inputs -- as
    vLLM's benchmark_moe copies a new random gating output before each replay: a time then
    averages many routings instead of reporting one draw's (one fixed draw per copy had put
    DeepSeek-V3's baseline bytes 5-6.5% under their expected value at 4 and 24 tokens)."""

    live: list[torch.Tensor]
    draws: list[list[torch.Tensor]]

    def __post_init__(self):
        if not self.draws or any(len(d) != len(self.live) for d in self.draws):
            raise ValueError("StepInputs: every draw needs one tensor per live input")

    def prepare(self, i: int) -> None:
        for dst, src in zip(self.live, self.draws[i % len(self.draws)]):
            dst.copy_(src)

    def map(self, fn) -> "StepInputs":
        """fn(step, tensor) applied to every draw (e.g. each step's router logits), as new
        StepInputs that rotate alike (live starts as draw 0)."""
        draws = [[fn(j, x) for j, x in enumerate(d)] for d in self.draws]
        return StepInputs([x.clone() for x in draws[0]], draws)


def graph_replay_rows(shape, w: dict, x: torch.Tensor, tiles, ref: torch.Tensor,
                      replays: int = 1, case: str = "graph", tol: float = 1e-2) -> list[dict]:
    """The timed path's correctness: ffn_step on `tiles` captured in a CUDA graph (after one
    eager run that compiles and fills the caches), output poisoned with NaN before each replay,
    against `ref` (fp32), within `tol`; battery-style rows, one per replay.  Without CUDA the
    step runs eagerly each time (same rows, no graph)."""
    cuda = x.device.type == "cuda"
    got = ffn_step(shape, w, x, tiles=tiles)
    if cuda:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            got = ffn_step(shape, w, x, tiles=tiles)
    rows = []
    for replay in range(replays):
        got.fill_(float("nan"))
        if cuda:
            g.replay()
            torch.cuda.synchronize()
        else:
            got.copy_(ffn_step(shape, w, x, tiles=tiles))
        rel = ((got.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        finite = bool(torch.isfinite(got).all())
        rows.append({"case": f"{case} replay {replay}", "kind": shape.kind,
                     "tokens": x.shape[0], "pattern": "router",
                     "dtype": str(x.dtype).removeprefix("torch."), "rel_err": rel,
                     "finite": finite, "tol": tol, "ok": finite and rel < tol})
    return rows


def torch_grouped_moe(x, w, ids, weights) -> torch.Tensor:
    """Reference baseline from library GEMMs: sort pairs, torch._grouped_mm x3, scatter-add.

    Counts come from scatter_add (torch.bincount would synchronise), so it captures in a graph.
    """
    T, k = ids.shape
    E = w["gate_proj"].shape[0]
    flat = ids.reshape(-1)
    order = flat.argsort()
    counts = torch.zeros(E, dtype=torch.int32, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = counts.cumsum(0, dtype=torch.int32)
    xs = x[order // k]
    g = torch._grouped_mm(xs, w["gate_proj"].transpose(1, 2), offs=offs)
    u = torch._grouped_mm(xs, w["up_proj"].transpose(1, 2), offs=offs)
    y = torch._grouped_mm(F.silu(g) * u, w["down_proj"].transpose(1, 2), offs=offs)
    y = y.float() * weights.reshape(-1)[order, None]
    out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
    return out.index_add_(0, order // k, y).to(x.dtype)


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    replays: int


def time_fn(fn, replays: int, per_call: int = 1, graph: bool = True, prepare=None) -> Timing:
    """Median time of `fn` (divided by per_call); CUDA graph replays on CUDA, a host clock on CPU.
    prepare(i), if given, runs before replay i (warm-ups: 0, 1, 2; timed: 0 .. replays - 1),
    outside the timed span: StepInputs.prepare, fresh inputs for every replay."""
    prepare = prepare or (lambda i: None)
    if not torch.cuda.is_available():
        fn()
        samples = []
        for i in range(max(1, replays)):
            prepare(i)
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6 / per_call)
        return _timing(samples)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compile + warm up outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run = g.replay
    else:
        run = fn
    for i in range(3):
        prepare(i)
        run()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for i, (s, e) in enumerate(zip(starts, ends)):
        prepare(i)  # stream-ordered before s: its copies are not timed
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1e3 / per_call for s, e in zip(starts, ends)]
    if graph:
        del g
    return _timing(samples)


def _timing(samples: list[float]) -> Timing:
    s = sorted(samples)
    return Timing(statistics.median(s), s[len(s) // 10], s[(len(s) * 9) // 10], len(s))
