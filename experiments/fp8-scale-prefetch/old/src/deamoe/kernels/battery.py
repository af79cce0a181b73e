"""Randomised correctness battery: Triton kernels vs the PyTorch reference layers in float32.

Used twice: by tests/kernels (CPU, Triton interpreter, small shapes, fp32 kernels) and by the
H200 script (CUDA, Table 1 shapes too, bf16 kernels).  Each case draws fresh weights and routing,
poisons every buffer the kernel allocates (NaN for floats, huge values for ints) so an unwritten
element cannot pass, and compares with `deamoe.model.layers.reference_forward` on float32
weights holding exactly the kernel's (rounded) values: rel = ||out - ref|| / ||ref||.

FP8 weights (check_case's `fp8`, deamoe.kernels.fp8): the FFN matrices block-quantised (the
router stays in the layer's dtype), the reference on their dequantised float32 values, the
default tiles' BLOCK_K fitted to the scale blocks.  Tolerances: `tolerance`.

Routing patterns:
  random       router logits ~ N(0, 1), routed by deamoe.routing.route
  same         every token has the same logits: one group gets all T rows (many blocks)
  empty        logits of the upper half of departments (experts for the baseline) pushed down:
               those groups receive no tokens
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch

from deamoe.kernels.fp8 import FP8_MMA_MIN_K, Fp8Format, fit_tiles, is_fp8, quantize_weights
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.routing import route

PATTERNS = ("random", "same", "empty")
SHARED_PROJ = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Case:
    name: str
    shape: MoEShape | DeaMoEShape
    tokens: int
    pattern: str = "random"
    seed: int = 0


@contextlib.contextmanager
def poisoned_allocations():
    """Make torch.empty return poisoned memory while the kernel allocates its buffers."""
    original = torch.empty

    def empty(*args, **kwargs):
        t = original(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype in (torch.int32, torch.int64):
            t.fill_(2**30 + 12345)
        return t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = original


def _logits(case: Case, n: int, device) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(case.seed)
    T = case.tokens
    if case.pattern == "same":
        logits = torch.randn(1, n, generator=g).expand(T, n).contiguous()
    else:
        logits = torch.randn(T, n, generator=g)
    if case.pattern == "empty":
        logits[:, n // 2 :] -= 1e4
    return logits.to(device)


def build_layer(shape: MoEShape | DeaMoEShape, device, seed: int, dtype=torch.float32):
    """A reference layer on `device` (DeaMoE experts random, so A_g/A_u/A_d matter).

    Built directly in `dtype` (bf16 halves the memory of the Table 1 shapes on the GPU); the
    reference then upcasts each gathered weight to float32 (`_Upcast`).
    """
    from deamoe.model.layers import build_ffn

    if isinstance(shape, DeaMoEShape) and shape.expert_init == "identity":
        shape = shape.replace(expert_init="random")
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            layer = build_ffn(shape, init_std=1.0)
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():  # scale so activations stay O(1) at any width
        for name, p in layer.named_parameters():
            if name != "router.weight":
                p.mul_(p.shape[-1] ** -0.5)
    return layer.eval()


def _round_(layer, dtype) -> None:
    with torch.no_grad():
        for p in layer.parameters():
            if p.dtype != dtype:
                p.copy_(p.to(dtype).float())


class _Upcast:
    """Stands in for a low-precision parameter: indexing returns float32 (for the reference).
    An FP8 weight (deamoe.kernels.fp8.Fp8Weight) is dequantised: a stack per gathered group, a
    single matrix (the shared experts', sliced along its rows) whole, then indexed."""

    def __init__(self, t):
        self.t = t

    def __getitem__(self, idx):
        if is_fp8(self.t):
            return self.t[idx].dequantize() if self.t.q.dim() == 3 else self.t.dequantize()[idx]
        return self.t[idx].float()


def float32_reference(layer, x, ids, weights, budget_bytes: float = 2e9,
                      fp8_weights: dict | None = None) -> torch.Tensor:
    """reference_forward of `layer` in float32 on its own (possibly rounded) weights, in chunks of
    tokens whose intermediates stay under `budget_bytes`.  fp8_weights: {parameter name:
    Fp8Weight} the kernels run on instead (kernel_weights' names): the reference takes their
    dequantised values."""
    import copy

    from deamoe.model.layers import reference_forward

    s = layer.shape
    fp8_weights = fp8_weights or {}
    if fp8_weights or any(p.dtype != torch.float32 for p in layer.parameters()):
        layer = copy.copy(layer)  # shallow: same weights, reached through _Upcast
        layer._parameters = {n: _Upcast(fp8_weights.get(n, p))
                             for n, p in layer._parameters.items()}
        if s.n_shared:  # the shared experts' Linear weights likewise
            shared = copy.copy(layer.shared_experts)
            shared._modules = {n: copy.copy(m) for n, m in shared._modules.items()}
            for name, m in shared._modules.items():
                m._parameters = {n: _Upcast(fp8_weights.get(f"shared_experts.{name}.{n}", p))
                                 for n, p in m._parameters.items()}
            layer._modules = {**layer._modules, "shared_experts": shared}
    per_token = ids.shape[1] * s.h_ffn * max(s.h, s.h_ffn) * 4
    chunk = max(1, int(budget_bytes // per_token))
    outs = [
        reference_forward(layer, x[i : i + chunk], ids[i : i + chunk], weights[i : i + chunk])
        for i in range(0, x.shape[0], chunk)
    ]
    return torch.cat(outs)


def kernel_weights(layer, dtype, fp8: Fp8Format | None = None) -> dict:
    """The layer's parameters by name, in `dtype` and contiguous: what the kernels take; with
    `fp8`, every FFN matrix (all but the router) block-quantised in that format."""
    w = {n: p.detach().to(dtype).contiguous() for n, p in layer.named_parameters()}
    return w if fp8 is None else quantize_weights(w, [n for n in w if n != "router.weight"], fp8)


def tolerance(device, dtype, fp8: Fp8Format | None = None) -> float:
    """The battery's bound on rel (module doc): float32 on the CPU 1e-4, bf16 1e-2; with FP8
    weights the same against the dequantised reference; w8a8 1e-1: its activations are
    quantised per group at every GEMM input (e4m3: 3 mantissa bits, ~2.4% rms each), which
    the reference does not do -- 2 GEMM inputs in the baseline (3.4-4.3e-2 on the CPU, vLLM's
    w8a8 path alike), 4 in DeaMoE (5.5-6.6e-2 on the CPU; 5.8-6.4e-2 by float32 emulation at
    DeepSeek-V3's and Qwen3's DeaMoE widths)."""
    if fp8 is not None and fp8.activations == "fp8":
        return 1e-1
    return 1e-4 if (dtype == torch.float32 and str(device) == "cpu") else 1e-2


def run_kernel(shape, w: dict, x, ids, weights, tiles=None, shared_tiles=None):
    from deamoe.kernels.deamoe_decode import DeaMoETiles, DeaMoEWeights, deamoe_forward
    from deamoe.kernels.fused_moe import MoETiles, fused_moe
    from deamoe.kernels.shared_expert import SharedTiles, with_shared

    def routed():
        if isinstance(shape, DeaMoEShape):
            return deamoe_forward(x, DeaMoEWeights.of(w), ids, weights,
                                  operator=shape.operator, tiles=tiles or DeaMoETiles())
        return fused_moe(x, w["gate_proj"], w["up_proj"], w["down_proj"], ids, weights,
                         tiles or MoETiles())

    if not shape.n_shared:
        return routed()
    return with_shared(routed, x, *(w[f"shared_experts.{p}.weight"] for p in SHARED_PROJ),
                       shared_tiles or SharedTiles())


@torch.no_grad()
def check_case(case: Case, device="cpu", dtype=torch.float32, layer=None, tiles=None,
               shared_tiles=None, fp8: Fp8Format | None = None) -> dict:
    """Run one case; returns a row with the relative error and whether it passed.  fp8: the
    layer's FFN matrices block-quantised in that format, against the reference on their
    dequantised values."""
    shape = case.shape
    if layer is None:
        layer = build_layer(shape, device, case.seed)
    _round_(layer, dtype)
    n = shape.n_expert
    ids, weights = route(shape, _logits(case, n, device))
    g = torch.Generator(device="cpu").manual_seed(case.seed + 1)
    x = torch.randn(case.tokens, shape.h, generator=g).to(device=device, dtype=dtype)
    w = kernel_weights(layer, dtype, fp8)
    ref = float32_reference(layer, x.float(), ids, weights,
                            fp8_weights={k: v for k, v in w.items() if is_fp8(v)})
    if device != "cpu" and torch.cuda.is_available():  # poison the caching allocator's blocks
        junk = torch.full((64 << 20,), float("nan"), device=device)
        del junk
    if fp8 is not None:
        from deamoe.kernels.deamoe_decode import DeaMoETiles
        from deamoe.kernels.fused_moe import MoETiles
        from deamoe.kernels.shared_expert import SharedTiles

        tiles = fit_tiles(tiles or (DeaMoETiles() if shape.kind == "deamoe" else MoETiles()), fp8)
        shared_tiles = fit_tiles(shared_tiles or SharedTiles(), fp8)
    with poisoned_allocations():
        out = run_kernel(shape, w, x, ids, weights, tiles, shared_tiles).float()
    if device != "cpu":
        torch.cuda.synchronize()
    rel = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    finite = bool(torch.isfinite(out).all())
    tol = tolerance(device, dtype, fp8)
    return {
        "case": case.name, "kind": shape.kind, "tokens": case.tokens, "pattern": case.pattern,
        "dtype": str(dtype).removeprefix("torch."), "weights": fp8.precision if fp8 else "bf16",
        "rel_err": rel, "finite": finite, "tol": tol, "ok": finite and rel < tol,
    }


def small_shapes() -> dict[str, MoEShape | DeaMoEShape]:
    """Shapes the interpreter handles in seconds; odd sizes exercise the K and N masks."""
    return {
        "moe-small": MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4),
        "moe-oddk": MoEShape(h=96, h_ffn=48, n_expert=8, k_expert=2),
        "deamoe-small": DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=5),
        "deamoe-oddk": DeaMoEShape(h=96, h_ffn=48, n_dept=2, n_expert=8, k_dept=2, k_expert=3),
        "deamoe-strict": DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=3, k_expert=4,
                                     dept_topk="strict"),
    }


def shared_shapes() -> dict[str, MoEShape | DeaMoEShape]:
    """Small shapes with always-active shared experts (two; one of twice the width)."""
    return {
        "moe-shared": MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4, n_shared=2),
        "deamoe-shared": DeaMoEShape(h=96, h_ffn=48, n_dept=2, n_expert=8, k_dept=2, k_expert=3,
                                     n_shared=1, shared_mult=2),
    }


def operator_variants(shape: DeaMoEShape) -> list[DeaMoEShape]:
    return [dataclasses.replace(shape, operator=op) for op in ("gelu", "rmsnorm", "none")]


# How a w8a8 layer's GEMMs meet their activations, each a pass of the battery: quantised in the
# GEMM's main loop (""), in a launch before each GEMM ('-pq'), or that and, for the
# up-projections, stored quantised by the GEMM before them ('-qo'), in groups of the weights'
# block_k or of half of it ('-qo-half': 64 columns of 128, on 64-column tiles), or stored with
# their absmax per row and group by the GEMM before them and quantised in the reader's main
# loop with it ('-qs').
W8A8_PASSES = ("", "-pq", "-qo", "-qo-half", "-qs")


def _qout_group(how: str, fmt: Fp8Format) -> int:
    return fmt.block_k // 2 if how == "-qo-half" else fmt.block_k


def pass_tiles(tiles, shape, how: str, fmt: Fp8Format):
    """A routed layer's `tiles` as w8a8 pass `how` runs them on `shape`'s layer.  DeaMoE's
    department up-projection takes '-pq' alone where the operator is applied outside the kernel."""
    from deamoe.kernels.deamoe_decode import FUSED_OPERATORS
    from deamoe.kernels.fp8 import UP_PROJECTIONS, with_preq, with_qout, with_qscale

    if how not in W8A8_PASSES:
        raise ValueError(f"w8a8 pass {how!r} is not one of {W8A8_PASSES}")
    if how == "-pq":
        return with_preq(tiles)
    outside = shape.kind == "deamoe" and shape.operator not in FUSED_OPERATORS
    ups = [u for u in UP_PROJECTIONS if not (outside and u == "dept_up")]
    if how.startswith("-qo"):
        return with_qout(tiles, fmt, ups, _qout_group(how, fmt))
    if how == "-qs":
        return with_qscale(tiles, ups)
    return tiles


def takes_pass(shape, how: str, fmt: Fp8Format | None) -> bool:
    """Whether `shape`'s layer can run w8a8 pass `how` in `fmt` (fp8.preq_fits, fp8.qout_fits;
    '-qs' as '-pq': its readers take the same groups, and any writer tile gathers into them)."""
    from deamoe.kernels.fp8 import preq_fits, qout_fits

    if how in ("-pq", "-qs"):
        return preq_fits(shape, fmt)
    if how.startswith("-qo"):
        return qout_fits(shape, fmt, _qout_group(how, fmt))
    return True


def full_battery(device: str, dtype, table1_tokens: list[int], models=None, progress=None,
                 fp8: Fp8Format | None = None, w8a8_pass: str = "") -> list[dict]:
    """The GPU battery: small shapes (all patterns, 1..256 tokens) and the Table 1 shapes; fp8:
    every case on block-quantised FFN matrices (small shapes: blocks of 32, so they hold
    several, 64 on '-qo-half'; the Table 1 shapes in `fp8`'s own blocks).  w8a8_pass (W8A8_PASSES): every GEMM's
    tile as that pass runs it (pass_tiles), on the shapes that can take it (takes_pass)."""
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fp8 import with_preq
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.kernels.shared_expert import SharedTiles
    from deamoe.shapes import TABLE1

    if w8a8_pass and (fp8 is None or fp8.activations != "fp8"):
        raise ValueError(f"full_battery: pass {w8a8_pass!r} (activations quantised outside the "
                         "GEMM's main loop) needs w8a8 weights")

    def tiles(shape, fmt):  # None: the defaults
        layer = DeaMoETiles() if shape.kind == "deamoe" else MoETiles()
        return pass_tiles(layer, shape, w8a8_pass, fmt) if w8a8_pass else None

    # a shared expert's output is summed into the layer's: '-pq' on every pass but the first
    shared_tiles = with_preq(SharedTiles()) if w8a8_pass else None

    def wanted(shape, fmt):
        return not w8a8_pass or takes_pass(shape, w8a8_pass, fmt)

    # '-qo-half' on blocks of 64: its half-block groups of 32 are the FP8 MMA's shortest K step
    block = 2 * FP8_MMA_MIN_K if w8a8_pass == "-qo-half" else FP8_MMA_MIN_K
    small = fp8 and dataclasses.replace(fp8, block_n=block, block_k=block)
    rows = []
    for name, shape in {**small_shapes(), **shared_shapes()}.items():
        for seed, tokens in enumerate((1, 37, 256) if wanted(shape, small) else ()):
            for pattern in PATTERNS:
                rows.append(check_case(Case(name, shape, tokens, pattern, seed), device, dtype,
                                       tiles=tiles(shape, small), shared_tiles=shared_tiles,
                                       fp8=small))
    for shape in (s for s in operator_variants(small_shapes()["deamoe-small"]) if wanted(s, small)):
        rows.append(check_case(Case(f"op-{shape.operator}", shape, 64, "random", 5), device,
                               dtype, tiles=tiles(shape, small), fp8=small))
    for model, row in TABLE1.items():
        if models is not None and model not in models:
            continue
        for shape in (s for s in (row.baseline, row.deamoe) if wanted(s, fp8)):
            layer = build_layer(shape, device, seed=11, dtype=dtype)
            cases = [Case(model, shape, t, "random", seed=20 + t) for t in table1_tokens]
            cases += [Case(model, shape, 64, "same", 1), Case(model, shape, 64, "empty", 2)]
            for case in cases:
                rows.append(check_case(case, device, dtype, layer=layer, tiles=tiles(shape, fp8),
                                       shared_tiles=shared_tiles, fp8=fp8))
                if progress is not None:
                    progress.update(1)
            del layer
            if device != "cpu":
                torch.cuda.empty_cache()
    return rows
