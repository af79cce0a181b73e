"""vLLM's fused MoE on its FP8 block-quantised path, as the peer of our FP8 baseline.

vLLM serves DeepSeek-V3's block-scaled FP8 experts through fused_experts_impl with
use_fp8_w8a8 and block_shape [128, 128]: before each of the two GEMMs the activations are
quantised per token and group of block_k columns (per_token_group_quant_fp8: scale = max|a| /
448), and its fused_moe_kernel multiplies FP8 operands, each K block's partial product times
the activation scale of its row and the weight scale of its block (on Hopper with SWAP_AB
where BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N, as vLLM's enable_swap_ab); config from its
get_default_config for "fp8_w8a8" with that block shape.  `VllmFp8MoE` runs exactly that
from the kernel file `bench peer extract` copies (its Triton quantiser standing in for vLLM's
CUDA per_token_group_fp8_quant op, one launch each; under the CPU interpreter, whose fp32 ->
fp8 cast is wrong, deamoe.kernels.fp8.quantize_activations, the same formula, in torch).

The weights are ours (deamoe.kernels.fp8.Fp8Weight): w13 = [gate; up] stacks their values and
scales (the same blocks where h_ffn is a multiple of block_n, as for every Table 1 shape).
`fp8_check_rows`: vLLM's and our FP8 layers on the same inputs against the reference on the
dequantised weights (the battery's), the peer's error beside ours.
"""

from __future__ import annotations

import torch

from deamoe.bench.vllm_peer import PeerError, VllmMoE, assignment_like_vllm, config_name, load_peer
from deamoe.kernels.fp8 import E4M3, Fp8Format, Fp8Weight, quantize, quantize_activations

VLLM_PATH = "fused_moe fp8_w8a8 block"  # vllm_peer.csv's vllm_path of the FP8 rows


def _on_hopper(device) -> bool:
    return (torch.device(device).type == "cuda"
            and torch.cuda.get_device_capability(device) == (9, 0))


class VllmFp8MoE(VllmMoE):
    """vLLM's fused_experts_impl for block-scaled FP8 weights (module doc): gate/up/down are
    Fp8Weight stacks of one format; activations bf16 (fp16 under the interpreter) in and out."""

    def __init__(self, peer, gate: Fp8Weight, up: Fp8Weight, down: Fp8Weight, batch: int,
                 k: int, shared=None):
        if shared is not None:
            raise PeerError("the FP8 peer runs layers without shared experts")
        self.fmt = gate.fmt
        super().__init__(peer, gate, up, down, batch, k)
        H, dev = self.w13.shape[2], self.w13.device
        bk = self.fmt.block_k
        self.x_q = torch.empty(batch, H, device=dev, dtype=E4M3)
        self.x_s = torch.empty(batch, -(-H // bk), device=dev, dtype=torch.float32)
        self.h_q = torch.empty(batch * k, self.I, device=dev, dtype=E4M3)
        self.h_s = torch.empty(batch * k, -(-self.I // bk), device=dev, dtype=torch.float32)

    def stacked(self, gate, up, down):
        if gate.shape[1] % self.fmt.block_n == 0:  # [gate; up]'s blocks are gate's and up's
            w13 = Fp8Weight(torch.cat([gate.q, up.q], dim=1).contiguous(),
                            torch.cat([gate.scale, up.scale], dim=1).contiguous(), self.fmt)
        else:
            w13 = quantize(torch.cat([gate.dequantize(), up.dequantize()], dim=1), self.fmt)
        return w13, down

    def dtype(self, gate) -> torch.dtype:
        return torch.bfloat16 if gate.q.is_cuda else torch.float16

    def default_config(self, batch: int, H: int) -> dict:
        return self.peer.get_default_config(batch, self.E, self.I, H, self.k, "fp8_w8a8",
                                            [self.fmt.block_n, self.fmt.block_k])

    def launch_args(self, A, B, cfg: dict) -> dict:
        q, s = A
        return dict(A=q, B=B.q, a_scale=s, b_scale=B.scale,
                    strides=(s.stride(0), s.stride(1), B.scale.stride(0), B.scale.stride(2),
                             B.scale.stride(1)),
                    group=(self.fmt.block_n, self.fmt.block_k), fp8=True,
                    swap=(_on_hopper(q.device) and cfg["BLOCK_SIZE_M"] < 64
                          and cfg["BLOCK_SIZE_N"] >= 64),
                    block_k=min(cfg.pop("BLOCK_SIZE_K"), self.fmt.block_n, self.fmt.block_k))

    def _quantize(self, a, q, s):
        """per_token_group_quant_fp8 of a into (q, s)."""
        if a.is_cuda:
            return vllm_quantize(self.peer, a, q, s, self.fmt.block_k)
        aq, as_ = quantize_activations(a, self.fmt.block_k)  # the interpreter's fp8 cast is
        q.copy_(aq)                                            # wrong: the same formula in torch
        s.copy_(as_)
        return q, s

    def _routed(self, x, topk_weights, assignment) -> torch.Tensor:
        self._gemm(self._quantize(x, self.x_q, self.x_s), self.w13, self.cache1, topk_weights,
                   assignment, False, self.k)
        rows = self.cache2.shape[0]
        self.act[(rows, -(-self.I // 1024))](self.cache1, self.cache2, self.I, BLOCK=1024)
        self._gemm(self._quantize(self.cache2, self.h_q, self.h_s), self.w2, self.cache3,
                   topk_weights, assignment, True, 1)
        return torch.sum(self.cache3, dim=1, out=self.out)


def vllm_quantize(peer, a, q, s, group: int):
    """vLLM's Triton per_token_group_quant_fp8 (its row-major scale path, no UE8M0 scales) of
    a [R, C] into q (e4m3) and s [R, C / group] float32, as its launcher calls it."""
    if a.shape[1] % group:
        raise PeerError(f"vLLM's per_token_group_quant_fp8 needs width {a.shape[1]} to be a "
                        f"multiple of the group {group}")
    block = 1 << (group - 1).bit_length()
    peer._per_token_group_quant_fp8[(a.numel() // group,)](
        a, q, s, group, a.shape[1], a.stride(0), 1e-10, fp8_min=-448.0, fp8_max=448.0,
        use_ue8m0=False, BLOCK=block, num_warps=min(max(block // 256, 1), 8), num_stages=1)
    return q, s


def fp8_check_rows(kernel, fmt: Fp8Format, cases=None, layer_dtype=torch.float32) -> list[dict]:
    """vLLM's FP8 path and ours, on the same block-quantised weights, inputs and routing,
    against the battery's float32 reference on the dequantised weights: one row per case and
    side (`impl` vllm / ours) with its rel err and the battery's tolerance for the format.
    cases: [(MoEShape, batch)]; default: small shapes (the CPU interpreter's), both block
    assignments of vLLM.  layer_dtype: the reference layer's (bf16 halves a Table 1 layer's
    memory; the reference reads its weights dequantised in float32 either way)."""
    import torch.nn.functional as F

    from deamoe.kernels.battery import (build_layer, float32_reference, kernel_weights,
                                        run_kernel, tolerance)
    from deamoe.kernels.fp8 import fit_tiles
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.routing import route
    from deamoe.shapes import MoEShape

    peer = load_peer(kernel)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if dev == "cuda" else torch.float16  # (vllm_peer.check_rows: why)
    cases = cases or [(MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2), 3),
                      (MoEShape(h=128, h_ffn=96, n_expert=16, k_expert=4), 37)]
    w8a8 = Fp8Format(fmt.block_n, fmt.block_k, "fp8")  # vLLM's block path quantises activations
    rows = []
    for shape, batch in cases:
        layer = build_layer(shape, dev, seed=batch, dtype=layer_dtype)
        w = kernel_weights(layer, dtype, w8a8)
        gen = torch.Generator(device=dev).manual_seed(batch)
        x = torch.randn(batch, shape.h, generator=gen, device=dev, dtype=dtype)
        ids, weights = route(shape, F.linear(x, w["router.weight"]))
        ref = float32_reference(layer, x.float(), ids, weights.float(),
                                fp8_weights={n: v for n, v in w.items() if n != "router.weight"})
        moe = VllmFp8MoE(peer, w["gate_proj"], w["up_proj"], w["down_proj"], batch,
                         shape.k_expert)
        assignment = assignment_like_vllm(ids, moe.config, shape.n_expert)
        moe.out.fill_(float("nan"))
        sides = {"vllm": (moe(x, weights.float().contiguous(), *assignment), config_name(moe.config)
                          + ("-naive" if assignment[0] is None else ""))}
        for precision in ("fp8", "fp8-w8a8"):  # ours, weight-only and w8a8, same values
            f = Fp8Format.of(precision, (fmt.block_n, fmt.block_k))
            ours = {n: v.with_format(f) if n != "router.weight" else v for n, v in w.items()}
            sides[f"ours {precision}"] = (run_kernel(shape, ours, x, ids, weights,
                                                     fit_tiles(MoETiles(), f)), "default")
        for impl, (got, config) in sides.items():
            got = got.float()
            rel = ((got - ref).norm() / ref.norm()).item()
            tol = tolerance(dev, dtype, w8a8 if impl != "ours fp8" else
                            Fp8Format(fmt.block_n, fmt.block_k))
            finite = bool(torch.isfinite(got).all())
            rows.append({"impl": impl, "h": shape.h, "h_ffn": shape.h_ffn,
                         "n_expert": shape.n_expert, "k": shape.k_expert, "batch": batch,
                         "block": f"{fmt.block_n}x{fmt.block_k}", "config": config,
                         "dtype": str(dtype).removeprefix("torch."), "rel_err": rel,
                         "finite": finite, "tol": tol, "ok": finite and rel < tol})
    return rows


def check_fp8(kernel, cases=None, fmt: Fp8Format = Fp8Format(32, 32)) -> int:
    """fp8_check_rows printed, one line a row; exit status 1 if any is off its tolerance."""
    rows = fp8_check_rows(kernel, fmt, cases)
    for r in rows:
        print(f"check fp8 {r['impl']:14s} E={r['n_expert']} k={r['k']} batch={r['batch']} "
              f"block {r['block']} {r['config']}: rel_err {r['rel_err']:.2e} (tol {r['tol']:g}) "
              f"{'ok' if r['ok'] else 'FAIL'}", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1
