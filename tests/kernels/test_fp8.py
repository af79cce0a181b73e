"""Block-scaled FP8 weights (deamoe.kernels.fp8) and the grouped GEMM / both layers on them, on the
CPU under Triton's interpreter: it runs e4m3 loads, TMA descriptors of e4m3 weights and tl.dot
on e4m3 operands (the kernel takes its float32 path there, DOT_F32, as for bf16); its fp32 ->
fp8 cast is wrong, which `round_e4m3` works around and the w8a8 tests below would catch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.battery import Case, check_case, shared_shapes, small_shapes, tolerance
from deamoe.kernels.fp8 import (E4M3, Fp8Format, Fp8Weight, fake_quantize_activations,
                                fit_tiles, quantize, quantize_activations, weight_bytes)
from deamoe.kernels.fused_moe import MoETiles, fused_moe
from deamoe.kernels.tile_config import TileConfig
from deamoe.routing import route
from deamoe.shapes import MoEShape

W16 = Fp8Format(16, 32)  # weight-only, several blocks per small matrix (partial ones too)
W8A8 = Fp8Format(16, 32, activations="fp8")


def test_quantize_keeps_each_blocks_maximum_and_bounds_the_error():
    torch.manual_seed(0)
    w = torch.randn(3, 40, 72) * torch.logspace(-3, 2, 72)  # partial blocks, uneven scales
    q = quantize(w, W16)
    assert q.q.dtype == E4M3 and q.scale.shape == (3, 3, 3) and q.scale.dtype == torch.float32
    back = q.dequantize()
    blocks = torch.nn.functional.pad(w.abs(), (0, 24, 0, 8)).view(3, 3, 16, 3, 32)
    amax = blocks.amax(dim=(2, 4))
    torch.testing.assert_close(q.scale, amax / 448)
    # each block's largest element maps to +-448 exactly; every other within half an e4m3
    # step: 1/16 of its size (3 mantissa bits), or half the subnormal step 2^-9
    assert (q.q.float().abs().amax(dim=(-1, -2)) == 448).all()
    scale = q.scale.repeat_interleave(16, 1)[:, :40].repeat_interleave(32, 2)[..., :72]
    err = (back - w).abs() / scale
    assert (err <= (w / scale).abs() / 16 + 2 ** -10 + 1e-6).all()
    assert weight_bytes(q) == 3 * 40 * 72 + 4 * 27 == 3 * W16.matrix_bytes(40, 72)
    assert weight_bytes(w) == 4 * w.numel()
    # indexing takes groups; chunked quantisation equals one piece
    assert q[1].q.shape == (40, 72) and q[None].scale.shape == (1, 3, 3, 3)
    chunked = quantize(w, W16, chunk_bytes=4 * 40 * 72)
    assert torch.equal(chunked.q.view(torch.uint8), q.q.view(torch.uint8))
    assert torch.equal(chunked.scale, q.scale)


def test_format_checks_and_tile_fit():
    with pytest.raises(ValueError, match="activations"):
        Fp8Format(activations="int8")
    with pytest.raises(ValueError, match="power of two"):
        Fp8Format(block_n=96)
    assert Fp8Format.of("bf16") is None and Fp8Format.of("fp8-w8a8").activations == "fp8"
    assert Fp8Format.of("fp8").precision == "fp8" and W8A8.precision == "fp8-w8a8"
    k256 = TileConfig.parse("n64-k256-w4-s3-tma")
    assert Fp8Format().fit_tile(k256).block_k == 128
    assert Fp8Format().fits(64) and not Fp8Format(activations="fp8").fits(64)
    # w8a8 with A quantised before the GEMM: K steps within one of A's groups
    w8a8 = Fp8Format(activations="fp8")
    assert w8a8.fits(64, 64) and w8a8.fits(64, 128) and not w8a8.fits(128, 64)
    assert w8a8.fits_tile(TileConfig.parse("n64-k64-w4-s8-pq")) and not w8a8.fits(256, 256)
    tiles = fit_tiles(MoETiles(w13=k256, w2=TileConfig.parse("n32-k64-w4-s3")), Fp8Format())
    assert (tiles.w13.block_k, tiles.w2.block_k, tiles.w13.tma) == (128, 64, True)
    with pytest.raises(ValueError, match="scale shape"):
        Fp8Weight(torch.zeros(4, 4, dtype=E4M3), torch.ones(2, 2))


def test_activation_quantiser_is_vllms_formula():
    a = torch.randn(5, 80) * 3
    q, s = quantize_activations(a, 32)
    assert q.shape == (5, 80) and s.shape == (5, 3)
    torch.testing.assert_close(s[:, 0], a[:, :32].abs().amax(1) * (1.0 / 448))
    assert (q.float().abs().amax(1) == 448).all()  # the first group's largest element
    torch.testing.assert_close(fake_quantize_activations(a, 32), a, rtol=0.07, atol=1e-6)


def _layer_inputs(seed=0, T=7):
    torch.manual_seed(seed)
    E, f, h, k = 8, 48, 96, 2
    g, u = torch.randn(E, f, h) / h ** .5, torch.randn(E, f, h) / h ** .5
    d = torch.randn(E, h, f) / f ** .5
    x = torch.randn(T, h)
    ids, w = route(MoEShape(h=h, h_ffn=f, n_expert=E, k_expert=k), torch.randn(T, E))
    return (g, u, d), x, ids, w


def _emulated_moe(mats, x, ids, w, act_quant):
    """The baseline layer in float32 with every GEMM input through `act_quant`."""
    g, u, d = mats
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for s in range(ids.shape[1]):
            e, a = ids[t, s], act_quant(x[t:t + 1])
            hid = torch.nn.functional.silu(a @ g[e].T) * (a @ u[e].T)
            out[t] += w[t, s] * (act_quant(hid) @ d[e].T)[0]
    return out


@pytest.mark.parametrize("fmt", [W16, W8A8], ids=["w8a16", "w8a8"])
@pytest.mark.parametrize("tile", ["n32-k32-w4-s1", "n16-k32-w4-s2-tma", "n32-k32-w4-s1-swap",
                                  "n16-k32-w4-s2-tma-swap-nf"])
def test_gemm_scales_each_k_block_exactly(fmt, tile):
    # the GEMM against float32 math on the dequantised weights -- with w8a8 also on the
    # activations quantised per 32-column group as vLLM's per_token_group_quant_fp8 does:
    # equal to rounding, so each scale is applied to its own K block and N rows (K = 48 and
    # 96: a partial last block; N tiles of 16 against 16-row blocks, of 32 across two)
    mats, x, ids, w = _layer_inputs()
    q = [quantize(m, fmt) for m in mats]
    t = TileConfig.parse(tile)
    got = fused_moe(x, *q, ids, w, MoETiles(w13=t, w2=t))
    act = (lambda a: fake_quantize_activations(a, 32)) if fmt.activations == "fp8" else (lambda a: a)
    ref = _emulated_moe([m.dequantize() for m in q], x, ids, w, act)
    assert ((got - ref).norm() / ref.norm()) < 1e-5


@pytest.mark.parametrize("tile", ["n32-k32-w4-s1", "n16-k32-w4-s2-tma-swap", "n32-k32-w4-s1-nf"])
@pytest.mark.parametrize("name", ["moe-small", "moe-oddk", "deamoe-small"])
def test_a_quantised_before_the_gemm_gives_the_main_loops_numbers(tile, name):
    # TileConfig.preq: the same per-(row, group) quantisation, in a launch before each GEMM
    # instead of in its main loop: the same layer output to float32 rounding, for every GEMM of
    # both layers (SwiGLU's shifted up input, per-department rows) on w8a8 weights
    shape = small_shapes()[name]
    base = TileConfig.parse(tile)
    assert dataclasses.replace(base, preq=True).name == tile.replace("-nf", "") + "-pq" + (
        "-nf" if base.nfast else "")
    outs = {}
    for precision, preq in (("fp8-w8a8", False), ("fp8-w8a8", True), ("fp8", False), ("fp8", True)):
        outs[precision, preq] = _layer_on_tile(shape, dataclasses.replace(base, preq=preq),
                                               Fp8Format(32, 32, "fp8" if precision == "fp8-w8a8" else "bf16"))
    ref = outs["fp8-w8a8", False]
    assert ((ref - outs["fp8-w8a8", True]).norm() / ref.norm()) < 1e-6
    assert torch.equal(outs["fp8", False], outs["fp8", True])  # weight-only: no effect


def test_a_quantised_before_the_gemm_refuses_groups_that_straddle_the_up_input():
    # DeaMoE's expert up-projection reads its up input at a_up_off = h_ffn = 48 columns: a
    # 32-column group would straddle gate and up, so the launch says so instead of mixing them
    t = TileConfig.parse("n32-k32-w4-s1-pq")
    with pytest.raises(ValueError, match="a_up_off \\(48\\)"):
        _layer_on_tile(small_shapes()["deamoe-oddk"], t, Fp8Format(32, 32, "fp8"))


# the unchosen departments' rows of DeaMoE's department output are poisoned (NaN) and
# quantised too (deamoe.kernels.fp8_quant): the interpreter warns of their all-NaN max
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
def test_preq_fits_says_which_layers_take_tiles_that_quantise_before_the_gemm():
    # the battery's '-pq' pass leaves out the layers fp8.preq_fits rejects: exactly those the
    # launch refuses (DeaMoE with h_ffn 48 against 32-column groups); the others match the
    # dequantised reference within w8a8's tolerance, shared experts on '-pq' tiles too
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fp8 import preq_fits, with_preq
    from deamoe.kernels.shared_expert import SharedTiles

    fmt = Fp8Format(32, 32, "fp8")
    refused = []
    for name, shape in {**small_shapes(), **shared_shapes()}.items():
        tiles = with_preq(DeaMoETiles() if shape.kind == "deamoe" else MoETiles())
        assert all(getattr(tiles, f).preq for f in ("w13", "w2") if hasattr(tiles, f))
        case = Case(name, shape, 5, "random", seed=1)
        if preq_fits(shape, fmt):
            row = check_case(case, tiles=tiles, shared_tiles=with_preq(SharedTiles()), fp8=fmt)
            assert row["ok"], row
        else:
            refused.append(name)
            with pytest.raises(ValueError, match="pre-quantised A"):
                check_case(case, tiles=tiles, fp8=fmt)
    assert sorted(refused) == ["deamoe-oddk", "deamoe-shared"]
    from deamoe.kernels.battery import full_battery
    with pytest.raises(ValueError, match="needs w8a8 weights"):
        full_battery("cpu", torch.float32, [], fp8=Fp8Format(32, 32), w8a8_pass="-pq")


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
@pytest.mark.parametrize("how, block, group, taken_names", [
    ("-qo", 32, 32, ["moe-small", "deamoe-small", "deamoe-strict", "moe-shared"]),
    # half of a 64-column block: 32, the FP8 MMA's shortest K step (DeaMoE's small layers refuse
    # '-pq' in blocks of 64; the GPU battery's Table 1 shapes run it in groups of 64)
    ("-qo-half", 64, 32, ["moe-small", "moe-shared"])])
def test_the_qo_pass_stores_the_up_projections_quantised_where_the_layer_can_take_it(
        how, block, group, taken_names):
    # the battery's '-qo' passes: every GEMM on '-pq' tiles, the up-projections also storing
    # their output quantised (BLOCK_N one group: the scale block, or half of it with the
    # readers' BLOCK_K one group); they leave out exactly the layers whose h_ffn is not whole
    # groups (or that refuse '-pq'), and keep DeaMoE's department up-projection plain where the
    # operator runs outside the kernel (rmsnorm)
    from deamoe.kernels.battery import operator_variants, pass_tiles, takes_pass
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fp8 import QOUT_READERS
    from deamoe.kernels.shared_expert import SharedTiles

    fmt = Fp8Format(block, block, "fp8")
    taken = []
    for name, shape in {**small_shapes(), **shared_shapes()}.items():
        layer = DeaMoETiles() if shape.kind == "deamoe" else MoETiles()
        tiles = pass_tiles(layer, shape, how, fmt)
        ups = ("w13",) if shape.kind == "moe" else ("dept_up", "expert_up")
        assert {f.name for f in dataclasses.fields(tiles) if getattr(getattr(tiles, f.name), "qout", 0)} \
            == set(ups) and all(getattr(tiles, u).block_n == group for u in ups)
        assert all(getattr(tiles, QOUT_READERS[u]).block_k == group for u in ups)  # one K step
        if takes_pass(shape, how, fmt):
            taken.append(name)
            row = check_case(Case(name, shape, 5, "random", seed=2), tiles=tiles,
                             shared_tiles=pass_tiles(SharedTiles(), shape, "-pq", fmt), fp8=fmt)
            assert row["ok"], row
    assert taken == taken_names
    rms = [s for s in operator_variants(small_shapes()["deamoe-small"]) if s.operator == "rmsnorm"][0]
    tiles = pass_tiles(DeaMoETiles(), rms, how, fmt)
    assert (tiles.dept_up.qout, tiles.dept_up.preq, tiles.expert_up.qout) == (False, True, True)
    if "deamoe-small" in taken:
        assert check_case(Case("op-rmsnorm", rms, 5, "random", 3), tiles=tiles, fp8=fmt)["ok"]
    with pytest.raises(ValueError, match="not one of"):
        pass_tiles(MoETiles(), small_shapes()["moe-small"], "-q", fmt)


def _layer_on_tile(shape, t: TileConfig, fmt: Fp8Format, **other) -> torch.Tensor:
    """One small layer's kernel output with every GEMM on tile t (but those named in `other`),
    on weights in `fmt`."""
    from deamoe.kernels.battery import build_layer, kernel_weights, run_kernel
    from deamoe.kernels.deamoe_decode import DeaMoETiles

    layer = build_layer(shape, "cpu", seed=3)
    torch.manual_seed(3)
    x = torch.randn(11, shape.h)
    ids, w = route(shape, torch.randn(11, shape.n_expert))
    tiles = (DeaMoETiles(**{"dept_up": t, "expert_up": t, "expert_down": t, "dept_down": t, **other})
             if shape.kind == "deamoe" else MoETiles(**{"w13": t, "w2": t, **other}))
    return run_kernel(shape, kernel_weights(layer, torch.float32, fmt), x, ids, w, tiles)


def test_gemm_refuses_a_tile_that_straddles_scale_blocks():
    mats, x, ids, w = _layer_inputs()
    q = [quantize(m, W8A8) for m in mats]
    t = TileConfig.parse("n32-k16-w4-s1")  # w8a8 needs BLOCK_K = block_k
    with pytest.raises(ValueError, match="does not fit"):
        fused_moe(x, *q, ids, w, MoETiles(w13=t, w2=t))
    with pytest.raises(ValueError, match="both be FP8"):
        fused_moe(x, q[0], mats[1], q[2], ids, w, MoETiles(w13=t, w2=t))


@pytest.mark.parametrize("fmt", [Fp8Format(32, 32), Fp8Format(32, 32, "fp8")],
                         ids=["w8a16", "w8a8"])
@pytest.mark.parametrize("name", sorted(small_shapes()) + sorted(shared_shapes()))
def test_layers_on_fp8_weights_match_the_dequantised_reference(fmt, name):
    # the battery's cases: both layers, shared experts, routed and poisoned buffers, the
    # reference on the dequantised weights; w8a16 within float32 rounding (1e-4), w8a8
    # within its stated tolerance (its activations are quantised, the reference's are not)
    shape = {**small_shapes(), **shared_shapes()}[name]
    for seed, (tokens, pattern) in enumerate([(1, "random"), (23, "same"), (9, "empty")]):
        row = check_case(Case(name, shape, tokens, pattern, seed=seed), fp8=fmt)
        assert row["finite"] and row["ok"], row
        assert row["weights"] == fmt.precision
        if fmt.activations == "bf16":
            assert row["rel_err"] < 1e-4, row
        else:  # the activations' quantisation is there: not the weight-only path
            assert 5e-3 < row["rel_err"] < tolerance("cpu", torch.float32, fmt), row


def test_fp8_stream_options_and_dense_department_gemm():
    from deamoe.kernels.deamoe_decode import DeaMoETiles

    shape = small_shapes()["deamoe-small"]
    t = TileConfig.parse("n32-k32-w4-s1-tma")
    tiles = DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t, split_launches=2,
                        dense_dept_up=True, dense_parts=1)
    for fmt in (Fp8Format(32, 32), Fp8Format(32, 32, "fp8")):
        row = check_case(Case("deamoe-small", shape, 13, "random", seed=4), tiles=tiles, fp8=fmt)
        assert row["ok"], row


def test_fp8_shared_memory_counts_one_byte_weights():
    t = TileConfig.parse("n128-k128-w4-s4-tma")
    tiles = MoETiles(w13=t, w2=t, block_m=64)
    assert tiles.shared_memory(2, Fp8Format()) < tiles.shared_memory(2)
    w13 = dataclasses.replace(tiles, w2=TileConfig(16, 16))
    # SwiGLU at BLOCK_M 64 (wgmma), 3 pipelined copies (num_stages - 1), per K of 128:
    # weight-only: 4 bf16 copies of both A inputs, 3 e4m3 copies of both weight tiles, one
    # weight tile widened to bf16 for wgmma -- Triton 3.6's own count for this kernel
    assert w13.shared_memory(2, Fp8Format()) == 128 * (4 * 2 * 2 * 64 + 3 * 2 * 128 + 2 * 128) == 262144
    # w8a8: 3 bf16 copies of both A inputs, 4 e4m3 copies of both weight tiles, one e4m3 copy of
    # the quantised A -- Triton 3.6's count less 576 B
    assert w13.shared_memory(2, W8A8) == 128 * (3 * 2 * 2 * 64 + 4 * 2 * 128 + 64) == 237568


@pytest.mark.parametrize("name", ["moe-small", "deamoe-small"])
def test_an_output_quantised_in_the_epilogue_gives_the_launch_after_its_numbers(name, monkeypatch):
    # TileConfig.qout: the up-projections store their output as e4m3 with per-(row, group)
    # scales, and the next GEMM reads it without a quantiser launch -- the same layer output as
    # quantising the stored output in a launch ('-pq'), for the baseline's w13 and DeaMoE's
    # department and expert up-projections (BLOCK_N = the 32-column group)
    shape = small_shapes()[name]
    if shape.h_ffn % 32:
        pytest.skip("its h_ffn is not a whole number of 32-column groups")
    pq, qo = TileConfig.parse("n32-k32-w4-s1-pq"), TileConfig.parse("n32-k32-w4-s1-pq-qo")
    fmt = Fp8Format(32, 32, "fp8")
    from deamoe.kernels import fp8_quant

    launches, quantize_groups = [], fp8_quant.quantize_groups

    def counted(*args, **kw):  # the quantiser launches before a GEMM
        launches.append(1)
        return quantize_groups(*args, **kw)
    monkeypatch.setattr(fp8_quant, "quantize_groups", counted)
    ref = _layer_on_tile(shape, pq, fmt)
    before, launches[:] = len(launches), []
    ups = {"w13": qo} if shape.kind == "moe" else {"dept_up": qo, "expert_up": qo}
    got = _layer_on_tile(shape, pq, fmt, **ups)
    assert ((got - ref).norm() / ref.norm()) < 1e-6
    # one quantiser launch left per layer input that is summed or given: x, and DeaMoE's S
    assert (before, len(launches)) == ((2, 1) if shape.kind == "moe" else (4, 2))


@pytest.mark.parametrize("where, tile, message", [
    ("w2", "n32-k32-w4-s1-pq-qo", "'-qo' .* is for a GEMM on w8a8 FP8 weights"),  # summed output
    ("w13", "n64-k32-w4-s1-pq-qo", "'-qo' needs BLOCK_N and c_up_off"),  # coarser than a block
])
def test_a_quantised_output_is_refused_where_it_cannot_be(where, tile, message):
    with pytest.raises(ValueError, match=message):
        _layer_on_tile(small_shapes()["moe-small"], TileConfig.parse("n32-k32-w4-s1-pq"),
                       Fp8Format(32, 32, "fp8"), **{where: TileConfig.parse(tile)})
    with pytest.raises(ValueError, match="'-qo'"):  # weight-only: activations stay bf16
        _layer_on_tile(small_shapes()["moe-small"], TileConfig.parse("n32-k32-w4-s1"),
                       Fp8Format(32, 32), w13=TileConfig.parse("n32-k32-w4-s1-qo"))


def test_w8a8_k_steps_are_the_fp8_mmas_shortest_at_least():
    # Triton compiles an MMA on two e4m3 operands for a K step of 32 columns or more (the
    # interpreter runs any): a shorter one is refused when the tiles are made or launched, not
    # left to a compile error on the GPU
    from deamoe.kernels.fp8 import FP8_MMA_MIN_K, qout_fits, with_qout

    w8a8 = Fp8Format(128, 128, "fp8")
    assert FP8_MMA_MIN_K == 32
    assert w8a8.fits(32, 128) and not w8a8.fits(16, 128)   # a '-pq' A in 128-column groups
    assert Fp8Format(128, 128).fits(16)                     # weight-only: a bf16 MMA
    assert not qout_fits(small_shapes()["moe-small"], Fp8Format(32, 32, "fp8"), 16)
    with pytest.raises(ValueError, match="w2 tile .* K steps of 16: an MMA on FP8 operands takes 32"):
        with_qout(MoETiles(), Fp8Format(32, 32, "fp8"), group=16)
    mats, x, ids, w = _layer_inputs()
    q = [quantize(m, W8A8) for m in mats]
    t = TileConfig.parse("n32-k16-w4-s1-pq")
    with pytest.raises(ValueError, match="BLOCK_K 16 does not fit"):
        fused_moe(x, *q, ids, w, MoETiles(w13=t, w2=t))
