"""The activation quantiser launched before a GEMM (deamoe.kernels.fp8_quant), under Triton's
interpreter on the CPU: vLLM's per-token-group formula, bit for bit the reference's e4m3 values
and scales.  The GEMM on its output: tests/kernels/test_fp8.py.  Up-projections storing their
output quantised in 64-column groups ('-qo' on n64 tiles) and the GEMMs reading them: here."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.battery import build_layer, kernel_weights, poisoned_allocations, run_kernel
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fp8 import (E4M3, Fp8Format, fake_quantize_activations, is_fp8,
                                quantize_activations, with_qout)
from deamoe.kernels.fp8_quant import quantised_rows, quantize_groups
from deamoe.kernels.fused_moe import W2, MoETiles
from deamoe.kernels.grouped_gemm import grouped_gemm
from deamoe.kernels.tile_config import TileConfig
from deamoe.routing import route
from deamoe.shapes import DeaMoEShape, MoEShape


def test_activations_quantised_before_the_gemm_equal_the_reference_quantiser():
    torch.manual_seed(1)
    a = torch.randn(6, 96) * torch.logspace(-4, 3, 96)  # groups of very different sizes
    a[2, 32:64] = 0.0  # an all-zero group: the 1e-10 floor
    q, s = quantize_groups(a, 32)
    ref_q, ref_s = quantize_activations(a, 32)
    assert q.dtype == E4M3 and q.shape == (6, 96) and s.shape == (6, 3)
    torch.testing.assert_close(s, ref_s, rtol=0, atol=0)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))
    # a partial last group, as the GEMM's masked last K block
    q, s = quantize_groups(a[:, :40], 32)
    ref_q, ref_s = quantize_activations(a[:, :40], 32)
    assert s.shape == (6, 2) and torch.equal(s, ref_s)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))
    with pytest.raises(ValueError, match="unit column stride"):
        quantize_groups(a.t(), 32)


def test_the_quantiser_takes_rows_in_blocks_and_zeroes_slots_of_every_row():
    # 37 rows: three programs of QUANT_ROWS rows along the rows, the last one partial (and rows of
    # a strided view); the slots of every row zeroed, the columns outside lo..hi left alone
    from deamoe.kernels.fp8_absmax import ZeroSlots
    from deamoe.kernels.fp8_quant import QUANT_ROWS

    torch.manual_seed(2)
    rows = 2 * QUANT_ROWS + 5
    wide = torch.randn(rows, 160) * torch.logspace(-3, 2, rows)[:, None]
    a = wide[:, :136]  # row stride 160, a partial last group
    slots = torch.full((rows, 12), 7.0)
    q, s = quantize_groups(a, 64, zero=ZeroSlots(slots, 2, 11))
    ref_q, ref_s = quantize_activations(a, 64)
    assert s.shape == (rows, 3) and torch.equal(s, ref_s)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))
    assert (slots[:, 2:11] == 0).all() and (slots[:, :2] == 7).all() and (slots[:, 11] == 7).all()


# -- '-qo' in groups finer than the weights' K block: a 64-column up-projection tile stores its
# output in groups of its own 64 columns, and the GEMM reading it steps K by <= 64 (the weights'
# scales still one per 128 x 128 block)

W8A8 = Fp8Format(128, 128, "fp8")  # DeepSeek-V3's blocks
QO64 = {  # the up-projections' tiles and their readers': plain, and TMA + swapped + deeper
    "plain": ("n64-k128-w4-s1-pq-qo", "n64-k64-w4-s1-pq-qo", "n32-k64-w4-s1-pq"),
    "tma-swap": ("n64-k128-w4-s2-tma-swap-pq-qo", "n64-k64-w4-s3-tma-swap-pq-qo",
                 "n128-k64-w4-s3-tma-swap-pq"),
}


def _inputs(shape, seed=5, T=9):
    layer = build_layer(shape, "cpu", seed=seed)
    torch.manual_seed(seed)
    ids, wts = route(shape, torch.randn(T, shape.n_expert))
    return kernel_weights(layer, torch.float32, W8A8), torch.randn(T, shape.h), ids, wts


def _emulated(shape, w: dict, x, ids, wts, q_in, q_mid):
    """The layer in float32 on the dequantised weights, x (and DeaMoE's S) through q_in, the
    up-projections' outputs through q_mid: per (token, slot), DeaMoE's S summed per department
    before its quantisation, as the kernel does."""
    w = {k: v.dequantize() for k, v in w.items() if is_fp8(v)}
    silu, out = torch.nn.functional.silu, torch.zeros_like(x)
    for t in range(x.shape[0]):
        xq, s = q_in(x[t:t + 1]), {}
        for k, e in enumerate(ids[t].tolist()):
            if shape.kind == "moe":
                hid = silu(xq @ w["gate_proj"][e].T) * (xq @ w["up_proj"][e].T)
                out[t] += wts[t, k] * (q_mid(hid) @ w["down_proj"][e].T)[0]
                continue
            j, f = e // (shape.n_expert // shape.n_dept), shape.h_ffn
            a1 = q_mid(torch.cat([silu(xq @ w["dept_gate"][j].T), silu(xq @ w["dept_up"][j].T)], 1))
            y = silu(a1[:, :f] @ w["expert_gate"][e].T) * (a1[:, f:] @ w["expert_up"][e].T)
            s[j] = s.get(j, 0) + wts[t, k] * silu(q_mid(y) @ w["expert_down"][e].T)
        for j, sj in s.items():
            out[t] += (q_in(sj) @ w["dept_down"][j].T)[0]
    return out


@pytest.mark.parametrize("tiles", sorted(QO64))
@pytest.mark.parametrize("shape", [MoEShape(h=128, h_ffn=256, n_expert=8, k_expert=2),
                                   MoEShape(h=128, h_ffn=160, n_expert=8, k_expert=2),
                                   DeaMoEShape(h=128, h_ffn=128, n_dept=2, n_expert=8, k_dept=2,
                                               k_expert=3)], ids=["moe", "moe-partial", "deamoe"])
def test_64_column_quantised_outputs_equal_the_reference_quantised_per_64_columns(shape, tiles):
    # both layers with '-qo' n64 up-projections against float32 math on the dequantised weights
    # with x and S quantised per 128 columns and the up-projections' outputs per 64 (a partial
    # last group where h_ffn = 160): equal to float32 rounding (rel 1e-5), so each 64-column
    # scale meets its own K step and each weight scale its 128-deep block (readers' K 128-256)
    up, mid, down = (TileConfig.parse(t) for t in QO64[tiles])
    w, x, ids, wts = _inputs(shape)
    if shape.kind == "moe":
        layer_tiles = MoETiles(w13=up, w2=dataclasses.replace(down, block_n=64))
    else:
        layer_tiles = DeaMoETiles(dept_up=up, expert_up=mid, expert_down=down,
                                  dept_down=TileConfig.parse("n64-k128-w4-s1-pq"))
    with poisoned_allocations():
        got = run_kernel(shape, w, x, ids, wts, layer_tiles)
    ref = _emulated(shape, w, x, ids, wts, lambda a: fake_quantize_activations(a, 128),
                    lambda a: fake_quantize_activations(a, 64))
    assert ((got - ref).norm() / ref.norm()) < 1e-5
    # the 128-column grouping of the same values is another computation, not this one
    ref128 = _emulated(shape, w, x, ids, wts, lambda a: fake_quantize_activations(a, 128),
                       lambda a: fake_quantize_activations(a, 128))
    assert ((got - ref128).norm() / ref.norm()) > 1e-3


def test_64_column_groups_bound_each_value_by_a_scale_no_larger_than_128_columns():
    # a finer group's amax is at most the coarser one's: so is its scale and rounding step
    a = torch.randn(7, 256) * torch.logspace(-3, 1, 256)
    (_, s64), (_, s128) = quantize_activations(a, 64), quantize_activations(a, 128)
    assert (s64 <= s128.repeat_interleave(2, 1)).all() and (s64 < s128.repeat_interleave(2, 1)).any()


MOE, DEAMOE96 = (MoEShape(h=128, h_ffn=128, n_expert=4, k_expert=2),
                 DeaMoEShape(h=128, h_ffn=96, n_dept=2, n_expert=4, k_dept=1, k_expert=2))
P = TileConfig.parse


@pytest.mark.parametrize("shape, tiles, message", [
    # a GEMM that sums its output (w2, expert_down) cannot store it quantised
    (MOE, dict(w2=P("n64-k128-w4-s1-pq-qo")), "'-qo' .* is for a GEMM on w8a8 FP8 weights"),
    (DEAMOE96, dict(expert_down=P("n64-k64-w4-s1-pq-qo")),
     "expert_down tile .*: it sums its output into S"),  # when the tiles are made
    # groups coarser than the weights' 128-column blocks (vLLM's): refused
    (MOE, dict(w13=P("n256-k128-w4-s1-pq-qo"), w2=P("n64-k128-w4-s1-pq")),
     r"'-qo' needs BLOCK_N and c_up_off \(0\) .* 256 columns"),
    # DeaMoE's department output: gate and up halves of h_ffn = 96, not whole 64-column groups
    (DEAMOE96, dict(dept_up=P("n64-k128-w4-s1-pq-qo"), expert_up=P("n64-k64-w4-s1-pq")),
     r"'-qo' needs BLOCK_N and c_up_off \(96\)"),
])
def test_a_64_column_quantised_output_is_refused_where_it_cannot_be(shape, tiles, message):
    w, x, ids, wts = _inputs(shape, T=3)
    cls = DeaMoETiles if shape.kind == "deamoe" else MoETiles
    with pytest.raises(ValueError, match=message):
        run_kernel(shape, w, x, ids, wts, cls(**tiles))


def test_a_gemm_reading_64_column_groups_on_128_deep_k_steps_is_refused():
    # when the tiles are made (before any kernel), and by the launch itself
    with pytest.raises(ValueError, match="w2 tile n64-k128-w4-s1-pq reads w13's '-qo' output "
                                         r"\(tile n64-k128-w4-s1-pq-qo: groups of 64 columns\): "
                                         "its BLOCK_K must divide 64"):
        MoETiles(w13=P("n64-k128-w4-s1-pq-qo"), w2=P("n64-k128-w4-s1-pq"))
    with pytest.raises(ValueError, match="expert_down tile .* BLOCK_K must divide 64"):
        DeaMoETiles(expert_up=P("n64-k64-w4-s1-pq-qo"))
    w, x, ids, wts = _inputs(MOE, T=3)
    al = align(ids, AlignSpec(n_groups=4, block_m=16))[0]
    hidden = quantised_rows(ids.numel(), 128, 64, x)
    with pytest.raises(ValueError, match="BLOCK_K 128 does not fit .* A quantised in groups of 64"):
        grouped_gemm(hidden, w["down_proj"], torch.zeros_like(x), al, ids,
                     W2.on(P("n64-k128-w4-s1-pq")), weights=wts)
    # with_qout makes the readers fit: BLOCK_K at most one group
    tiles = with_qout(DeaMoETiles(), W8A8, group=64)
    assert [getattr(tiles, n).name for n in ("dept_up", "expert_up", "expert_down", "dept_down")] \
        == ["n64-k128-w4-s4-pq-qo", "n64-k64-w4-s4-pq-qo", "n64-k64-w4-s4-pq", "n64-k128-w4-s4-pq"]
