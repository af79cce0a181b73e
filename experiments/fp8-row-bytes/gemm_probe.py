"""Probe: the w8a8 block-scaled GEMM at decode shape (4 tokens against the dense department
matrices, the weights on the MMA's M side as the swapped tiles run it) with K steps of one
128-column scale block against steps of one 256-column TMA box split into its two blocks in
registers, each half's MMA scaled by its own block's scales.  The same math either way; checks
both against float32 math on the dequantised operands, prints us and TB/s of weights read."""
import sys

import deamoe.kernels  # noqa: F401  (TRITON_INTERPRET=1 without CUDA, before triton loads)
import torch
import triton
import triton.language as tl
from deamoe.kernels.fp8 import Fp8Format, quantize, quantize_activations
from deamoe.kernels.fp8_mma import halves


@triton.jit
def _part(w, a, w_s, a_s, DOT_F32: tl.constexpr):  # [BN, BK] x [BM, BK] -> [BN, BM], scaled
    if DOT_F32:
        w = w.to(tl.float32)
        a = a.to(tl.float32)
    return tl.dot(w, tl.trans(a)) * w_s[:, None] * a_s[None, :]


@triton.jit
def probe_gemm(w_desc, w_ptr, ws_ptr, a_ptr, as_ptr, c_ptr, M, N, K, n_kb,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP: tl.constexpr, DOT_F32: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    ws_row = ws_ptr + (offs_n // 128) * n_kb
    for k0 in range(0, K, BLOCK_K):
        w = w_desc.load([pid * BLOCK_N, k0])
        a = tl.load(a_ptr + offs_m[:, None] * K + k0 + offs_k[None, :], mask=m_ok[:, None], other=0.0)
        kb = k0 // GROUP
        if BLOCK_K == GROUP:
            acc += _part(w, a, tl.load(ws_row + kb), tl.load(as_ptr + offs_m * n_kb + kb, mask=m_ok, other=1.0), DOT_F32)
        else:  # one box of two scale blocks
            w0, w1 = halves(w)
            a0, a1 = halves(a)
            acc += _part(w0, a0, tl.load(ws_row + kb), tl.load(as_ptr + offs_m * n_kb + kb, mask=m_ok, other=1.0), DOT_F32)
            acc += _part(w1, a1, tl.load(ws_row + kb + 1), tl.load(as_ptr + offs_m * n_kb + kb + 1, mask=m_ok, other=1.0), DOT_F32)
    c = tl.trans(acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], c, mask=m_ok[:, None])


def gemm(wq, a_q, a_s, block_k, block_n=64, stages=4, out=None):
    from triton.tools.tensor_descriptor import TensorDescriptor

    N, K = wq.q.shape
    M = a_q.shape[0]
    out = torch.empty(M, N, device=wq.q.device) if out is None else out
    desc = TensorDescriptor(wq.q, [N, K], [K, 1], [block_n, block_k])
    probe_gemm[(N // block_n,)](desc, wq.q, wq.scale, a_q, a_s, out, M, N, K, wq.scale.shape[1],
                                BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, GROUP=128,
                                DOT_F32=not torch.cuda.is_available(), num_warps=4, num_stages=stages)
    return out


def operands(N, K, M, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    w = quantize(torch.randn(N, K, generator=g, device=device) * K ** -0.5, Fp8Format(activations="fp8"))
    a_q, a_s = quantize_activations(torch.randn(M, K, generator=g, device=device))
    ref = (a_q.float() * a_s.repeat_interleave(128, 1)) @ w.dequantize().T
    return w, a_q, a_s, ref


def compiled(bk):
    """(shared bytes, MMA instructions, TTGIR) of the probe compiled for sm_90 (no GPU needed;
    run with TRITON_INTERPRET=0): with k256 the weight tile goes from shared memory straight into
    the two wgmma A operands in registers (split, no layout conversion), FP8 wgmma kept."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    consts = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=bk, GROUP=128, DOT_F32=False)
    sig = {"w_desc": f"tensordesc<fp8e4nv[64, {bk}]>", "w_ptr": "*fp8e4nv", "ws_ptr": "*fp32",
           "a_ptr": "*fp8e4nv", "as_ptr": "*fp32", "c_ptr": "*fp32", "M": "i32", "N": "i32",
           "K": "i32", "n_kb": "i32", **{k: "constexpr" for k in consts}}
    fn = probe_gemm
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]]
             for n in ("a_ptr", "c_ptr", "N", "K", "ws_ptr", "as_ptr")}
    k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "num_stages": 4})
    mma = sorted(set(re.findall(r"(wgmma\.mma_async\S*|mma\.sync\S*)", k.asm["ptx"])))
    return k.metadata.shared, mma, k.asm["ttgir"]


if __name__ == "__main__":
    if sys.argv[1:] == ["compile"]:
        for bk in (128, 256):
            shared, mma, ttgir = compiled(bk)
            print(bk, shared, mma, "convert_layout", ttgir.count("convert_layout"))
        sys.exit()
    if not torch.cuda.is_available():  # the interpreter: both K steps against the reference
        w, a_q, a_s, ref = operands(256, 512, 4, "cpu")
        for bk in (128, 256):
            got = gemm(w, a_q, a_s, bk)
            print(bk, ((got - ref).norm() / ref.norm()).item())
        sys.exit()
    from deamoe.bench.layer_step import time_fn

    for name, N, K in (("Qwen3 dense", 8 * 2 * 1536, 4096), ("DSV3 dense", 8 * 2 * 2048, 7168)):
        copies = [operands(N, K, 4, "cuda", seed) for seed in range(4)]
        nbytes = copies[0][0].nbytes
        for block_n in (64, 128):
            for bk in (128, 256):
                for stages in (4, 6):
                    outs = [torch.empty(4, N, device="cuda") for _ in copies]
                    try:
                        errs = [((gemm(w, q, s, bk, block_n, stages, o) - r).norm() / r.norm()).item()
                                for (w, q, s, r), o in zip(copies, outs)]
                        us = time_fn(lambda: [gemm(w, q, s, bk, block_n, stages, o)
                                              for (w, q, s, _), o in zip(copies, outs)],
                                     50, per_call=len(copies)).median_us
                    except Exception as exc:
                        print(f"{name} n{block_n}-k{bk}-s{stages}: {type(exc).__name__} {str(exc)[:120]}")
                        continue
                    print(f"{name} n{block_n}-k{bk}-s{stages}: {us:6.1f} us {nbytes / us / 1e6:5.2f} TB/s "
                          f"max rel err {max(errs):.1e}", flush=True)
        del copies
        torch.cuda.empty_cache()
