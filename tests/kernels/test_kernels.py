"""Kernel correctness battery on the CPU under Triton's interpreter (GPU cases marked `gpu`).

Each case draws fresh weights and routing, poisons every buffer the kernels allocate, and
compares with deamoe.model.layers.reference_forward in float32.
"""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.battery import Case, check_case, operator_variants, shared_shapes, small_shapes

SHAPES = small_shapes()


# the layers with shared experts too (their other tests: test_shared_expert.py)
@pytest.mark.parametrize("name", sorted(SHAPES) + sorted(shared_shapes()))
@pytest.mark.parametrize("pattern", ["random", "same", "empty"])
def test_layer_matches_reference(name, pattern):
    shape = {**SHAPES, **shared_shapes()}[name]
    for seed, tokens in enumerate((1, 5, 23)):
        row = check_case(Case(name, shape, tokens, pattern, seed=seed))
        assert row["finite"], row
        assert row["rel_err"] < 1e-4, row


@pytest.mark.parametrize("shape", operator_variants(SHAPES["deamoe-small"]), ids=lambda s: s.operator)
def test_deamoe_operators(shape):
    row = check_case(Case("op", shape, 9, "random", seed=3))
    assert row["ok"], row


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_tma_weight_loads_match_reference(name):
    # the -tma tiles: weight tiles by tensor descriptor (zero-filled past K and past the last
    # group; partial N tiles read the next group's rows into columns that are never stored)
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.kernels.tile_config import TileConfig

    t = TileConfig.parse("n32-k32-w4-s2-tma")
    tiles = (DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t)
             if SHAPES[name].kind == "deamoe" else MoETiles(w13=t, w2=t))
    for seed, tokens in enumerate((1, 23)):
        row = check_case(Case(name, SHAPES[name], tokens, "random", seed=seed), tiles=tiles)
        assert row["ok"], row


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("tile", ["n32-k32-w4-s2-swap", "n32-k32-w4-s2-tma-swap",
                                  "n32-k32-w4-s2-nf", "n32-k32-w4-s2-tma-swap-nf"])
def test_tile_options_match_reference(name, tile):
    # -swap tiles compute C^T = B @ A^T (weights on the MMA's M side) and transpose back before
    # the epilogue; -nf tiles only change which program takes which (M block, N tile).  Every
    # epilogue (SwiGLU, both halves, weighted atomic sums) and row mode must give the same
    # layer, with a partial last block / N tile, empty departments, split launches and a dense
    # dept_up
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.kernels.tile_config import TileConfig

    t = TileConfig.parse(tile)
    deamoe = SHAPES[name].kind == "deamoe"
    for seed, (tokens, pattern) in enumerate(((1, "random"), (23, "empty"), (37, "random"))):
        tiles = (DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t,
                             dense_dept_up=seed == 2, split_launches=1 + seed % 2)
                 if deamoe else MoETiles(w13=t, w2=t, split_launches=1 + seed % 2))
        row = check_case(Case(name, SHAPES[name], tokens, pattern, seed=seed), tiles=tiles)
        assert row["ok"], row


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("parts", [2, 3])
def test_split_launches_match_reference(name, parts):
    # groups cut into parts, each part's GEMMs computing only its groups (on the GPU: one CUDA
    # stream per part; here one after another): together they must give the whole layer
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles

    tiles = (DeaMoETiles(split_launches=parts) if SHAPES[name].kind == "deamoe"
             else MoETiles(split_launches=parts))
    for seed, (tokens, pattern) in enumerate(((1, "random"), (23, "empty"))):
        row = check_case(Case(name, SHAPES[name], tokens, pattern, seed=seed), tiles=tiles)
        assert row["ok"], row


DEAMOE_SHAPES = [n for n in sorted(SHAPES) if SHAPES[n].kind == "deamoe"]


@pytest.mark.parametrize("name", DEAMOE_SHAPES)
@pytest.mark.parametrize("parts,dense_block_m", [(1, 0), (2, 0), (1, 32), (2, 64)])
def test_dense_dept_up_matches_reference(name, parts, dense_block_m):
    # the department up-projection for every (token, department), used or not: the unused rows
    # of a1 are never read, so the layer must equal the reference, also with departments empty;
    # with its own BLOCK_M (blocks of up to 64 rows over 1-37 tokens: padding and several blocks)
    from deamoe.kernels.deamoe_decode import DeaMoETiles

    tiles = DeaMoETiles(dense_dept_up=True, split_launches=parts, dept_block_m=16,
                        dense_block_m=dense_block_m)
    for seed, (tokens, pattern) in enumerate(((1, "random"), (23, "empty"), (37, "same"))):
        row = check_case(Case(name, SHAPES[name], tokens, pattern, seed=seed), tiles=tiles)
        assert row["ok"], row


def test_make_tiles_reads_switches_written_as_integers():
    from deamoe.decode.knobs import make_tiles, parse_knobs

    shape = SHAPES[DEAMOE_SHAPES[0]]
    t = make_tiles(shape, parse_knobs("dense_dept_up=1;split_launches=2"))
    assert t.dense_dept_up is True and t.split_launches == 2
    assert make_tiles(shape, parse_knobs("dense_dept_up=0")).dense_dept_up is False


@pytest.mark.parametrize("operator", ["rmsnorm", "gelu"])
def test_dense_dept_up_with_operators(operator):
    import dataclasses

    from deamoe.kernels.deamoe_decode import DeaMoETiles

    shape = dataclasses.replace(SHAPES["deamoe-small"], operator=operator)
    row = check_case(Case("op", shape, 9, "random", seed=4), tiles=DeaMoETiles(dense_dept_up=True))
    assert row["ok"], row


def test_dense_alignment_covers_every_token_department_pair_once():
    from deamoe.kernels.align import dense_alignment

    T, G, per, bm = 21, 4, 5, 16
    al, ids = dense_alignment(T, G, per, bm, "cpu")
    P = T * G
    assert ids.shape == (T, G) and bool((ids // per == torch.arange(G)).all())
    nb = int(al.num_blocks.item())
    assert nb == al.max_blocks == G * 2
    slots = al.sorted_pairs[: nb * bm].view(nb, bm)
    seen = []
    for b in range(nb):
        g = int(al.block_group[b])
        real = slots[b][slots[b] < P]
        assert bool((real % G == g).all())  # ROW_TOKDEPT of pair p: (p // G) * G + g
        seen += real.tolist()
    assert sorted(seen) == list(range(P))
    assert int((al.sorted_pairs == P).sum()) == nb * bm - P


def test_route_callable_equals_given_routing_and_both_is_an_error():
    from deamoe.kernels.battery import kernel_weights, build_layer
    from deamoe.kernels.deamoe_decode import DeaMoETiles, DeaMoEWeights, deamoe_forward
    from deamoe.routing import route

    shape = SHAPES["deamoe-small"]
    layer = build_layer(shape, "cpu", 2)
    w = kernel_weights(layer, torch.float32)
    x = torch.randn(7, shape.h, generator=torch.Generator().manual_seed(0))
    ids, weights = route(shape, torch.randn(7, shape.n_expert, generator=torch.Generator().manual_seed(1)))
    args = [x, DeaMoEWeights.of(w)]
    given = deamoe_forward(*args, ids, weights, shape.operator)
    for dense in (False, True):
        tiles = DeaMoETiles(dense_dept_up=dense)
        routed = deamoe_forward(*args, None, None, shape.operator, tiles,
                                route=lambda: (ids, weights))
        torch.testing.assert_close(routed, given, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="either ids/weights or route"):
        deamoe_forward(*args, ids, weights, shape.operator, route=lambda: (ids, weights))


def test_split_ranges_cover_all_groups_once():
    from deamoe.kernels.streams import split_ranges

    for n, parts in [(8, 2), (8, 4), (7, 3), (2, 4), (256, 4)]:
        ranges = split_ranges(n, parts)
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert all(hi > lo for lo, hi in ranges) and len(ranges) == min(n, parts)
    with pytest.raises(ValueError, match="split_launches"):
        split_ranges(8, 0)


def test_tile_config_names_round_trip_and_bad_ones_fail():
    from deamoe.kernels.tile_config import TileConfig

    for text in ("n64-k128-w4-s4", "n128-k64-w8-s4-tma", "n64-k64-w4-s3-swap",
                 "n128-k64-w4-s3-tma-swap", "n64-k64-w4-s3-nf", "n64-k64-w4-s3-tma-swap-nf"):
        assert TileConfig.parse(text).name == text
    assert TileConfig.parse("n64-k64-w4-s3-tma-swap").swap
    for bad in ("n64-k128-w4", "n64-k128-w4-s4-x2", "n64-k128-w4-s4-tma-tma", "tma",
                "n64-k64-w4-s3-swap-tma", "n64-k64-w4-s3-swap-swap"):
        with pytest.raises(ValueError, match="tile config"):
            TileConfig.parse(bad)


def test_batch_beyond_one_block_per_group():
    # 70 tokens on the same experts: one group spans 5 blocks of 16 rows, last one padded
    row = check_case(Case("many", SHAPES["deamoe-small"], 70, "same", seed=7))
    assert row["ok"], row


@pytest.mark.parametrize("T,k,E,bm", [(9, 3, 6, 4), (300, 4, 32, 16), (40, 3, 100, 8)],
                         ids=["few-groups-1pass", "few-groups-5passes", "many-groups"])
def test_align_groups_and_pads(T, k, E, bm):
    ids = torch.stack([torch.randperm(E)[:k] for _ in range(T)])
    (al,) = align(ids, AlignSpec(n_groups=E, block_m=bm))
    nb = int(al.num_blocks)
    flat = ids.reshape(-1)
    counts = torch.bincount(flat, minlength=E)
    assert nb == int(((counts + bm - 1) // bm).sum())
    slots = al.sorted_pairs[: nb * bm].view(nb, bm)
    seen = []
    for b in range(nb):
        g = int(al.block_group[b])
        real = slots[b][slots[b] < T * k]
        assert real.numel() > 0 and (flat[real.long()] == g).all()
        seen += real.tolist()
    assert sorted(seen) == list(range(T * k))  # every pair exactly once
    assert (slots[slots >= T * k] == T * k).all()  # padding holds the sentinel


def test_align_departments_dedup():
    ids = torch.tensor([[0, 1, 4], [5, 6, 7]])  # per_group 4: token 0 -> depts {0, 1}; token 1 -> {1}
    (al,) = align(ids, AlignSpec(n_groups=2, per_group=4, dedup=True, block_m=2))
    nb = int(al.num_blocks)
    slots = al.sorted_pairs[: nb * 2]
    kept = sorted(int(p) for p in slots if p < 6)
    assert kept == [0, 2, 3]  # first slot of each (token, department)


def _expected_pairs(ids, per, dedup):
    groups = (ids // per).tolist()
    kept = {}
    for t, row in enumerate(groups):
        for slot, g in enumerate(row):
            if not dedup or g not in row[:slot]:
                kept[t * len(row) + slot] = g
    return kept


@pytest.mark.parametrize("memory_phases", [False, True])
@pytest.mark.parametrize("T,k,n_dept,per,bm", [(5, 4, 4, 6, 16), (37, 10, 8, 84, 16),
                                               (131, 10, 8, 40, 32), (230, 10, 8, 84, 16)])
def test_align_two_groupings_match_reference(memory_phases, T, k, n_dept, per, bm, monkeypatch):
    # DeaMoE's launch: departments (dedup, constexpr experts per department) and experts, in
    # registers when all pairs fit one pass and through memory otherwise (230 x 10 = 2300 pairs
    # > 2048) or with memory_phases: each kept pair exactly once in a block of its group, every
    # padding slot the sentinel (the buffers poisoned first: the padding is what the sentinel
    # fill left), the block counts exact
    from deamoe.kernels import align as align_mod

    make_buffers = align_mod._buffers

    def poisoned(*args):
        al, scratch = make_buffers(*args)
        al.sorted_pairs.fill_(-7)
        return al, scratch
    monkeypatch.setattr(align_mod, "_buffers", poisoned)
    gen = torch.Generator().manual_seed(T)
    E = n_dept * per
    # tokens crowd a few departments so that dedup has work: ids from 3 random departments
    depts = torch.stack([torch.randperm(n_dept, generator=gen)[:3] for _ in range(T)])
    ids = torch.stack([torch.randperm(3 * per, generator=gen)[:k] for _ in range(T)])
    ids = depts.gather(1, ids // per) * per + ids % per
    assert ids.max() < E
    dept_al, exp_al = align_mod.align(
        ids, AlignSpec(n_groups=n_dept, per_group=per, dedup=True, block_m=bm),
        AlignSpec(n_groups=E, block_m=bm), memory_phases=memory_phases)
    P = T * k
    for al, g_per, dedup in ((dept_al, per, True), (exp_al, 1, False)):
        want = _expected_pairs(ids, g_per, dedup)
        counts = torch.bincount(torch.tensor(list(want.values())), minlength=al.n_groups)
        nb = int(al.num_blocks)
        assert nb == int(((counts + bm - 1) // bm).sum())
        slots = al.sorted_pairs[: nb * bm].view(nb, bm)
        seen = {}
        for b in range(nb):
            real = slots[b][slots[b] < P].tolist()
            assert real, f"block {b} has no pair"
            seen.update({p: int(al.block_group[b]) for p in real})
        assert seen == want
        assert int((slots == P).sum()) == nb * bm - len(want)


def test_dense_dept_up_gemm_computes_every_token_department_row():
    # the dense department GEMM (dense_dept_up) on `dense_alignment`: act(Wg x) | act(Wu x)
    # for every (token, department) row, whatever the routing
    from deamoe.decode.weights import random_weights
    from deamoe.kernels.align import dense_alignment
    from deamoe.kernels.deamoe_decode import dept_up_gemm
    from deamoe.kernels.tile_config import TileConfig

    dea = SHAPES[DEAMOE_SHAPES[0]]
    w = random_weights(dea, "cpu", dtype=torch.float32, seed=1)
    x = torch.randn(3, dea.h)
    a1 = torch.full((3 * dea.n_dept, 2 * dea.h_ffn), float("nan"))
    al, every = dense_alignment(3, dea.n_dept, dea.experts_per_dept, 16, "cpu")
    dept_up_gemm(x, w["dept_gate"], w["dept_up"], a1, al, every, dea.experts_per_dept,
                 TileConfig.parse("n32-k32-w4-s2"))
    silu = torch.nn.functional.silu
    gate = silu(torch.einsum("th,dfh->tdf", x, w["dept_gate"]))
    up = silu(torch.einsum("th,dfh->tdf", x, w["dept_up"]))
    want = torch.cat([gate, up], dim=-1).reshape(3 * dea.n_dept, 2 * dea.h_ffn)
    torch.testing.assert_close(a1, want, rtol=1e-4, atol=1e-4)


def test_bad_input_is_rejected():
    from deamoe.kernels.fused_moe import fused_moe

    x = torch.randn(2, 8)
    w = torch.randn(4, 4, 8)
    with pytest.raises(ValueError, match="ids"):
        fused_moe(x, w, w, torch.randn(4, 8, 4), torch.zeros(3, 2, dtype=torch.long), torch.ones(2, 2))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_gpu_bf16(name):
    for seed, tokens in enumerate((1, 37, 256)):
        row = check_case(Case(name, SHAPES[name], tokens, "random", seed), "cuda", torch.bfloat16)
        assert row["ok"], row



def test_layer_output_buffer_holds_lead_words_then_out():
    # align zeroes the one float32 buffer; out follows the lead words (DeaMoE's S).  The bf16
    # output sum needs bf16 atomics: on the CPU (interpreter) out stays float32 even when the
    # tiles ask for bf16
    from deamoe.kernels.grouped_gemm import bf16_atomics, layer_output, output_dtype

    x = torch.zeros(3, 8)
    acc, out = layer_output(x, lead_words=5)
    assert acc.dtype == torch.float32 and acc.numel() == 5 + 24 and out.shape == (3, 8)
    assert out.data_ptr() == acc.data_ptr() + 5 * 4
    acc, out = layer_output(x.bfloat16(), out_bf16=True)
    assert output_dtype(x.bfloat16(), out_bf16=True) == torch.float32
    assert not bf16_atomics(x.bfloat16())  # the same rule keeps DeaMoE's S in fp32 here
    assert out.dtype == torch.float32 and acc.numel() == 24


@pytest.mark.parametrize("out_bf16", [True, False])
@pytest.mark.parametrize("s_bf16", [True, False])
def test_bf16_sum_fields_reach_the_launches(monkeypatch, s_bf16, out_bf16):
    # the tiles' out_bf16 / s_bf16 fields, not module globals, decide the dtype of the buffers
    # the atomic GEMMs sum into: expert_down into S, dept_down (DeaMoE) and w2 (baseline) into
    # out.  bf16 atomics exist only on a GPU, so the device rule is made true here and the
    # launches are recorded instead of run
    from deamoe.decode.weights import random_weights
    from deamoe.kernels import deamoe_decode, fused_moe, grouped_gemm
    from deamoe.kernels.deamoe_decode import DeaMoETiles, DeaMoEWeights, deamoe_stages
    from deamoe.kernels.fused_moe import MoETiles, fused_moe_stages

    for mod in (grouped_gemm, deamoe_decode):
        monkeypatch.setattr(mod, "bf16_atomics", lambda x: True)
    sums = []

    def record(a, b, c, al, ids, spec, **kw):
        if spec.atomic:
            sums.append(c.dtype)
    for mod in (deamoe_decode, fused_moe):
        monkeypatch.setattr(mod, "grouped_gemm", record)
        monkeypatch.setattr(mod, "align", lambda *a, **kw: (None, None))
    bf16 = torch.bfloat16
    dea = SHAPES[DEAMOE_SHAPES[0]]
    w = random_weights(dea, "cpu", dtype=bf16)
    ids, weights = torch.zeros(3, dea.k_expert, dtype=torch.long), torch.ones(3, dea.k_expert)
    out, stages = deamoe_stages(torch.zeros(3, dea.h, dtype=bf16), DeaMoEWeights.of(w), ids,
                                weights, tiles=DeaMoETiles(s_bf16=s_bf16, out_bf16=out_bf16))
    for _, launch, _ in stages:
        launch()
    want = [bf16 if s_bf16 else torch.float32, bf16 if out_bf16 else torch.float32]
    assert sums == want and out.dtype == want[1]
    sums.clear()
    moe = next(s for s in SHAPES.values() if s.kind == "moe")
    w = random_weights(moe, "cpu", dtype=bf16)
    ids, weights = torch.zeros(3, moe.k_expert, dtype=torch.long), torch.ones(3, moe.k_expert)
    out, stages = fused_moe_stages(torch.zeros(3, moe.h, dtype=bf16), w["gate_proj"],
                                   w["up_proj"], w["down_proj"], ids, weights,
                                   MoETiles(out_bf16=out_bf16))
    for _, launch, _ in stages:
        launch()
    assert sums == want[1:] and out.dtype == want[1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_gpu_fp32_sums_match_reference(name):
    # the battery runs the committed bf16 sums; the fp32 path the fields switch to stays right
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles

    shape = SHAPES[name]
    tiles = (DeaMoETiles(s_bf16=False, out_bf16=False) if shape.kind == "deamoe"
             else MoETiles(out_bf16=False))
    for seed, tokens in enumerate((1, 37, 256)):
        row = check_case(Case(name, shape, tokens, "random", seed), "cuda", torch.bfloat16,
                         tiles=tiles)
        assert row["ok"], row


@pytest.mark.parametrize("parts,dense_parts", [(2, 1), (4, 1), (4, 3)])
def test_dense_parts_match_reference(parts, dense_parts):
    # the first parts' department up-projection dense, the others routed in their own chains:
    # the same layer, also where a routed part's departments are all unchosen ("same": every
    # token on one expert)
    from deamoe.kernels.deamoe_decode import DeaMoETiles

    tiles = DeaMoETiles(dense_dept_up=True, split_launches=parts, dense_parts=dense_parts)
    for seed, (tokens, pattern) in enumerate(((1, "random"), (23, "empty"), (9, "same"))):
        row = check_case(Case("deamoe-small", SHAPES["deamoe-small"], tokens, pattern, seed=seed),
                         tiles=tiles)
        assert row["ok"], row


@pytest.mark.parametrize("knobs", [dict(dense_parts=1, split_launches=2),  # no dense GEMM
                                   dict(dense_dept_up=True, dense_parts=2, split_launches=2),
                                   dict(dense_dept_up=True, dense_parts=1)])
def test_dense_parts_outside_the_split_is_an_error(knobs):
    from deamoe.kernels.deamoe_decode import DeaMoETiles

    with pytest.raises(ValueError, match="dense_parts"):
        check_case(Case("deamoe-small", SHAPES["deamoe-small"], 3, "random", seed=0),
                   tiles=DeaMoETiles(**knobs))
