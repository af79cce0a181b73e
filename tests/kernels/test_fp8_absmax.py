"""'-qs' (deamoe.kernels.fp8_absmax), on the CPU under Triton's interpreter: an up-projection
stores its output as it is and gathers each row's absmax per 128-column group (atomic max), the
GEMM after it quantises its A tile with it.  Both layers equal float32 math on the dequantised
weights with every GEMM input quantised per 128 columns (as '-pq' does), and the '-pq' tile's
own outputs; the slots are zeroed on every call, by launches that run anyway; what cannot take
it is refused with one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.battery import (Case, build_layer, check_case, kernel_weights,
                                    operator_variants, pass_tiles, poisoned_allocations,
                                    run_kernel, shared_shapes, small_shapes, takes_pass)
from deamoe.kernels.deamoe_decode import (EXPERT_DOWN, EXPERT_UP, DeaMoETiles, DeaMoEWeights,
                                          deamoe_stages, dept_up_gemm)
from deamoe.kernels.fp8 import Fp8Format, fake_quantize_activations, is_fp8, with_qscale
from deamoe.kernels.fp8_absmax import absmax_rows
from deamoe.kernels.fused_moe import W2, MoETiles, fused_moe_stages
from deamoe.kernels.shared_expert import SharedTiles
from deamoe.kernels.tile_config import TileConfig
from deamoe.routing import route
from deamoe.shapes import DeaMoEShape, MoEShape

W8A8 = Fp8Format(128, 128, "fp8")  # DeepSeek-V3's blocks
SMALL = Fp8Format(32, 32, "fp8")  # several blocks per small matrix
P = TileConfig.parse
MOE = MoEShape(h=128, h_ffn=256, n_expert=8, k_expert=2)
MOE_PARTIAL = MoEShape(h=128, h_ffn=160, n_expert=8, k_expert=2)  # a partial last group
DEAMOE = DeaMoEShape(h=128, h_ffn=128, n_dept=2, n_expert=8, k_dept=2, k_expert=3)


def _inputs(shape, fmt=W8A8, seed=5, T=9):
    layer = build_layer(shape, "cpu", seed=seed)
    torch.manual_seed(seed)
    ids, wts = route(shape, torch.randn(T, shape.n_expert))
    return kernel_weights(layer, torch.float32, fmt), torch.randn(T, shape.h), ids, wts


def _layer_tiles(shape, up: TileConfig, down: TileConfig, **options):
    """Every up-projection on `up`, every other GEMM on `down`."""
    if shape.kind == "moe":
        return MoETiles(w13=up, w2=down, **options)
    return DeaMoETiles(dept_up=up, expert_up=up, expert_down=down, dept_down=down, **options)


def _emulated(shape, w: dict, x, ids, wts, group: int):
    """The layer in float32 on the dequantised weights, every GEMM input quantised per (row,
    `group` columns); DeaMoE's S summed per department before its quantisation, as the kernel."""
    w = {k: v.dequantize() for k, v in w.items() if is_fp8(v)}
    silu, out = torch.nn.functional.silu, torch.zeros_like(x)

    def q(a):
        return fake_quantize_activations(a, group)
    for t in range(x.shape[0]):
        xq, s = q(x[t:t + 1]), {}
        for k, e in enumerate(ids[t].tolist()):
            if shape.kind == "moe":
                hid = silu(xq @ w["gate_proj"][e].T) * (xq @ w["up_proj"][e].T)
                out[t] += wts[t, k] * (q(hid) @ w["down_proj"][e].T)[0]
                continue
            j, f = e // (shape.n_expert // shape.n_dept), shape.h_ffn
            a1 = q(torch.cat([silu(xq @ w["dept_gate"][j].T), silu(xq @ w["dept_up"][j].T)], 1))
            y = silu(a1[:, :f] @ w["expert_gate"][e].T) * (a1[:, f:] @ w["expert_up"][e].T)
            s[j] = s.get(j, 0) + wts[t, k] * silu(q(y) @ w["expert_down"][e].T)
        for j, sj in s.items():
            out[t] += (q(sj) @ w["dept_down"][j].T)[0]
    return out


def _rel(got, ref) -> float:
    return ((got - ref).norm() / ref.norm()).item()


# the writers: inside one group (n32, n64: two to four programs meet in a slot) and over two
# whole groups (n256; the gate half of DeaMoE's h_ffn 128 output is half a tile); the readers on
# a '-pq' tile or the main loop's quantiser's (the absmax path replaces either), TMA-swapped
WRITERS = {"n64": ("n64-k128-w4-s1-pq-qs", "n64-k128-w4-s1-pq"),
           "n32-inloop": ("n32-k128-w4-s2-tma-swap-pq-qs", "n128-k128-w4-s2-tma-swap"),
           "n256": ("n256-k128-w4-s1-pq-qs", "n64-k128-w4-s3-tma-swap-pq")}


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")  # unwritten rows, quantised by -pq
@pytest.mark.parametrize("tiles", sorted(WRITERS))
@pytest.mark.parametrize("shape", [MOE, MOE_PARTIAL, DEAMOE], ids=["moe", "moe-partial", "deamoe"])
def test_both_layers_on_qs_equal_the_reference_and_the_pq_tiles(shape, tiles):
    # float32 math on the dequantised weights with every GEMM input quantised per 128 columns:
    # equal to rounding (rel 1e-5, as '-pq'), and the '-pq' tiles' own outputs to 1e-6
    up, down = (P(t) for t in WRITERS[tiles])
    w, x, ids, wts = _inputs(shape)
    with poisoned_allocations():  # the slots hold NaN until zeroed
        got = run_kernel(shape, w, x, ids, wts, _layer_tiles(shape, up, down))
    ref = _emulated(shape, w, x, ids, wts, 128)
    assert _rel(got, ref) < 1e-5
    pq = run_kernel(shape, w, x, ids, wts, _layer_tiles(shape, dataclasses.replace(up, qscale=False),
                                                        dataclasses.replace(down, preq=True)))
    assert _rel(got, pq) < 1e-6
    # quantising per 64 columns is another computation, not this one
    assert _rel(got, _emulated(shape, w, x, ids, wts, 64)) > 1e-3


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
@pytest.mark.parametrize("block_n", [16, 32, 64])
@pytest.mark.parametrize("name", ["moe-small", "moe-oddk", "deamoe-small", "deamoe-strict"])
def test_qs_gives_the_pq_numbers_without_the_quantiser_launches_between(name, block_n, monkeypatch):
    # 32-column blocks: the writers' tiles half a group, one, two; one quantiser launch left per
    # layer input that is given or summed: x, and DeaMoE's S
    from deamoe.kernels import fp8_quant

    shape = small_shapes()[name]
    w, x, ids, wts = _inputs(shape, SMALL, seed=3, T=11)
    launches, quantize_groups = [], fp8_quant.quantize_groups

    def counted(*args, **kw):
        launches.append(1)
        return quantize_groups(*args, **kw)
    monkeypatch.setattr(fp8_quant, "quantize_groups", counted)
    pq = TileConfig(block_n, 32, 4, 1, preq=True)
    ref = run_kernel(shape, w, x, ids, wts, _layer_tiles(shape, pq, pq))
    before, launches[:] = len(launches), []
    with poisoned_allocations():
        got = run_kernel(shape, w, x, ids, wts,
                         _layer_tiles(shape, dataclasses.replace(pq, qscale=True), pq))
    assert _rel(got, ref) < 1e-6
    assert (before, len(launches)) == ((2, 1) if shape.kind == "moe" else (4, 2))


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
@pytest.mark.parametrize("options", [
    dict(split_launches=2), dict(dense_dept_up=True), dict(dense_dept_up=True, split_launches=2),
    dict(dense_dept_up=True, split_launches=4, dense_parts=1, dense_block_m=32),
], ids=["split", "dense", "dense-split", "dense-parts"])
def test_qs_under_every_stream_schedule(options):
    # each department launch zeroes its own departments' slots (the dense GEMM beside align, the
    # routed parts beside it); the expert outputs' slots are zeroed by align, before every part
    shape = small_shapes()["deamoe-small"]
    w, x, ids, wts = _inputs(shape, SMALL, seed=4, T=13)
    pq = P("n16-k32-w4-s2-pq")
    ref = run_kernel(shape, w, x, ids, wts, _layer_tiles(shape, pq, pq, **options))
    with poisoned_allocations():
        got = run_kernel(shape, w, x, ids, wts,
                         _layer_tiles(shape, dataclasses.replace(pq, qscale=True), pq, **options))
    assert _rel(got, ref) < 1e-6
    if "dense_parts" not in options:  # the baseline's split too
        moe = small_shapes()["moe-small"]
        w, x, ids, wts = _inputs(moe, SMALL, seed=4, T=13)
        tiles = MoETiles(w13=dataclasses.replace(pq, qscale=True), w2=pq, split_launches=2)
        with poisoned_allocations():
            got = run_kernel(moe, w, x, ids, wts, tiles)
        assert _rel(got, run_kernel(moe, w, x, ids, wts, dataclasses.replace(
            tiles, w13=pq))) < 1e-6


def _stages(shape, w, x, ids, wts, tiles):
    if shape.kind == "moe":
        return fused_moe_stages(x, w["gate_proj"], w["up_proj"], w["down_proj"], ids, wts, tiles)
    return deamoe_stages(x, DeaMoEWeights.of(w), ids, wts, shape.operator, tiles)


def _run_twice(shape, tiles, seed=6):
    """One step's launches run on x, then again on other, smaller inputs in the same buffers
    (as a CUDA graph replays): the second output, and the '-pq' layer's on those inputs."""
    w, x, ids, wts = _inputs(shape, SMALL, seed=seed, T=7)
    x = x * 8  # large maxima first: a slot left over would scale the second call coarser
    second = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    out, stages = _stages(shape, w, x, ids, wts, tiles)
    for _, launch, _ in stages:
        launch()
    x.copy_(second)
    for _, launch, _ in stages:
        launch()
    plain = dataclasses.replace(tiles, **{f.name: dataclasses.replace(getattr(tiles, f.name),
                                                                      qscale=False)
                                          for f in dataclasses.fields(tiles)
                                          if isinstance(getattr(tiles, f.name), TileConfig)})
    return out.clone(), run_kernel(shape, w, second, ids, wts, plain)


@pytest.mark.parametrize("name, options", [("moe-small", {}), ("moe-small", dict(split_launches=2)),
                                           ("deamoe-small", {}),
                                           ("deamoe-small", dict(dense_dept_up=True, split_launches=2,
                                                                 dense_parts=1))])
def test_the_absmax_slots_are_zeroed_on_every_call(name, options, monkeypatch):
    shape = small_shapes()[name]
    pq = P("n32-k32-w4-s1-pq")
    tiles = _layer_tiles(shape, dataclasses.replace(pq, qscale=True), pq, **options)
    got, ref = _run_twice(shape, tiles)
    assert _rel(got, ref) < 1e-6
    # the check sees a slot left unzeroed: align's second buffer (the (token, expert) rows), or
    # the x quantiser's departments (DeaMoE's department output)
    import deamoe.kernels.deamoe_decode as dd
    import deamoe.kernels.fused_moe as fm
    from deamoe.kernels.fp8_absmax import ZeroSlots

    monkeypatch.setattr(fm, "align", lambda ids, *s, zero: align(
        ids, *s, zero=zero[0] if isinstance(zero, tuple) else zero))
    real = dd.with_zeroed
    monkeypatch.setattr(dd, "with_zeroed", lambda *a: real(*a)._replace(
        zero=ZeroSlots(real(*a).zero.slots, 0, 0)))
    got, ref = _run_twice(shape, tiles)
    assert not _rel(got, ref) < 1e-4


def test_align_zeroes_two_buffers():
    ids = torch.tensor([[0, 1], [1, 2]])
    a, b = torch.full((5,), float("nan")), torch.full((70000,), float("nan"))
    align(ids, AlignSpec(n_groups=3), zero=(a, b))
    assert not a.any() and not b.any()
    with pytest.raises(ValueError, match="a tuple of two"):
        align(ids, AlignSpec(n_groups=3), zero=(a, a, b))


MOE_SMALL, DEAMOE_ODD = small_shapes()["moe-small"], small_shapes()["deamoe-oddk"]


@pytest.mark.parametrize("shape, tiles, message", [
    # a GEMM that sums its output (w2, expert_down) cannot store it with its absmax
    (MOE_SMALL, dict(w2=P("n32-k32-w4-s1-pq-qs")),
     "tile n32-k32-w4-s1-pq-qs: '-qs' .* is for a GEMM on w8a8 FP8 weights"),
    (small_shapes()["deamoe-small"], dict(expert_down=P("n32-k32-w4-s1-pq-qs")),
     "expert_down tile n32-k32-w4-s1-pq-qs: it sums its output into S"),  # when the tiles are made
    # the department output's gate and up halves (h_ffn 48) against 32-column groups: a 32-wide
    # writer tile straddles them; a 16-wide one does not, but its reader's K steps would
    (DEAMOE_ODD, dict(dept_up=P("n32-k32-w4-s1-pq-qs")),
     r"'-qs' needs BLOCK_N to divide or be a multiple of the 32-column groups and c_up_off \(48\)"),
    (DEAMOE_ODD, dict(dept_up=P("n16-k32-w4-s1-pq-qs")), r"pre-quantised A needs a_up_off \(48\)"),
    # one output, two ways
    (MOE_SMALL, dict(w13=TileConfig(32, 32, 4, 1, preq=True, qout=True, qscale=True)),
     "'-qo' and '-qs' are two ways to store one output: give one"),
])
def test_qs_is_refused_where_it_cannot_be(shape, tiles, message):
    w, x, ids, wts = _inputs(shape, SMALL, T=3)
    base = P("n32-k32-w4-s1-pq")  # every other GEMM
    layer = _layer_tiles(shape, base, base)
    with pytest.raises(ValueError, match=message):
        run_kernel(shape, w, x, ids, wts, dataclasses.replace(layer, **tiles))


def test_qs_needs_w8a8_and_on_dept_up_a_quantiser_launch():
    w, x, ids, wts = _inputs(MOE_SMALL, Fp8Format(32, 32), T=3)  # weight-only: A stays bf16
    with pytest.raises(ValueError, match="'-qs' .* is for a GEMM on w8a8 FP8 weights"):
        run_kernel(MOE_SMALL, w, x, ids, wts, MoETiles(w13=P("n32-k32-w4-s1-qs")))
    # DeaMoE's department up-projection: the launch quantising x zeroes its slots, so '-pq'
    with pytest.raises(ValueError, match="dept_up tile n32-k32-w4-s1-qs: '-qs' on the department "
                                         "up-projection needs '-pq'"):
        DeaMoETiles(dept_up=P("n32-k32-w4-s1-qs"))
    shape = small_shapes()["deamoe-small"]
    w, x, ids, wts = _inputs(shape, SMALL, T=3)
    al = align(ids, AlignSpec(n_groups=4, per_group=4, dedup=True))[0]
    a1 = absmax_rows(3 * 4, 64, 32, x)
    with pytest.raises(ValueError, match="needs '-pq' here: the launch quantising its A zeroes"):
        dept_up_gemm(x, w["dept_gate"], w["dept_up"], a1, al, ids, 4, P("n32-k32-w4-s1-qs"))
    # the operator applied outside the kernel (rmsnorm): dept_up cannot store what it reads
    rms = [s for s in operator_variants(shape) if s.operator == "rmsnorm"][0]
    with pytest.raises(ValueError, match=r"cannot store it with its absmax \('-qs'\)"):
        run_kernel(rms, w, x, ids, wts, DeaMoETiles(dept_up=P("n32-k32-w4-s1-pq-qs")))


def test_tile_names_with_qs():
    t = P("n64-k128-w4-s5-tma-swap-pq-qs-nf")
    assert (t.qscale, t.preq, t.qout, t.nfast, t.name) == (True, True, False, True,
                                                           "n64-k128-w4-s5-tma-swap-pq-qs-nf")
    for bad in ("n64-k128-w4-s4-pq-qo-qs", "n64-k128-w4-s4-qs-pq", "n64-k128-w4-s4-nf-qs"):
        with pytest.raises(ValueError, match="-qs in -qo's place"):
            P(bad)


def test_the_shared_memory_of_a_qs_reader_counts_its_bf16_a():
    # the GEMM after a '-qs' one holds bf16 A (pipelined) as on the main loop's quantiser, not
    # the e4m3 A of its '-pq' tile; the layers' estimates say so
    t, qs = P("n64-k128-w4-s4-pq"), P("n64-k128-w4-s4-pq-qs")
    e4m3 = W2.on(t).shared_memory(64, 2, W8A8)
    bf16 = W2.on(t).shared_memory(64, 2, W8A8, a_absmax=True)
    assert e4m3 == 128 * 4 * (64 + 64)  # 3 pipelined copies and wgmma's one more, all e4m3
    assert bf16 == 128 * (3 * 2 * 64 + 4 * 64) + 4 * 3 * 64  # bf16 A, e4m3 weights, absmax
    assert MoETiles(block_m=64, w13=P("n16-k128-w4-s2-pq-qs"), w2=t).shared_memory(2, W8A8) == bf16
    dea = DeaMoETiles(expert_block_m=64, dept_up=P("n16-k128-w4-s2-pq"), expert_up=qs,
                      expert_down=t, dept_down=P("n16-k128-w4-s2-pq"))
    assert dea.shared_memory(2, W8A8) == max(
        EXPERT_UP.on(qs).shared_memory(64, 2, W8A8),
        EXPERT_DOWN.on(t).shared_memory(64, 2, W8A8, a_absmax=True))


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
def test_the_qs_pass_of_the_battery():
    # every GEMM on '-pq' tiles, the up-projections also '-qs' (DeaMoE's department one not
    # where the operator runs outside the kernel); the layers that take '-pq' take it
    taken = []
    for name, shape in {**small_shapes(), **shared_shapes()}.items():
        tiles = pass_tiles(DeaMoETiles() if shape.kind == "deamoe" else MoETiles(), shape, "-qs",
                           SMALL)
        ups = ("w13",) if shape.kind == "moe" else ("dept_up", "expert_up")
        assert {f.name for f in dataclasses.fields(tiles)
                if getattr(getattr(tiles, f.name), "qscale", 0)} == set(ups)
        if takes_pass(shape, "-qs", SMALL):
            taken.append(name)
            row = check_case(Case(name, shape, 5, "random", seed=2), tiles=tiles,
                             shared_tiles=pass_tiles(SharedTiles(), shape, "-pq", SMALL),
                             fp8=SMALL)
            assert row["ok"], row
    assert taken == ["moe-small", "moe-oddk", "deamoe-small", "deamoe-strict", "moe-shared"]
    rms = [s for s in operator_variants(small_shapes()["deamoe-small"]) if s.operator == "rmsnorm"][0]
    tiles = pass_tiles(DeaMoETiles(), rms, "-qs", SMALL)
    assert (tiles.dept_up.qscale, tiles.dept_up.preq, tiles.expert_up.qscale) == (False, True, True)
    assert check_case(Case("op-rmsnorm", rms, 5, "random", 3), tiles=tiles, fp8=SMALL)["ok"]
    assert with_qscale(MoETiles(w13=P("n16-k32-w8-s3"))).w13.name == "n16-k32-w8-s3-pq-qs"
