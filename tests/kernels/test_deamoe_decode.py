"""DeaMoE's decode layer with its department down-projection over pair rows
(DeaMoETiles.pair_dept_down) on the CPU under Triton's interpreter: the same layer as the
reference under every schedule, in float32 and on w8a8 FP8 weights where expert_down
stores its rows quantised for dept_down ('-qo': one quantiser launch fewer), and the tiles the
option cannot take refused in one line when they are made."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.battery import Case, check_case, small_shapes, tolerance
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fp8 import Fp8Format
from deamoe.kernels.tile_config import TileConfig

SHAPE = small_shapes()["deamoe-small"]  # h_ffn 32: one 32-column group, k_expert 5 of k_dept 2


@pytest.mark.parametrize("knobs", [
    {}, {"split_launches": 2}, {"dense_dept_up": True},
    {"dense_dept_up": True, "split_launches": 4, "dense_parts": 1},  # a routed dept_up too
], ids=["one-launch", "split", "dense", "dense-parts"])
def test_pair_rows_into_the_department_down_projection_give_the_reference(knobs, monkeypatch):
    import deamoe.kernels.deamoe_decode as decode

    specs, launch = [], decode.grouped_gemm
    monkeypatch.setattr(decode, "grouped_gemm", lambda *a, **kw: specs.append(a[5]) or launch(*a, **kw))
    tiles = DeaMoETiles(pair_dept_down=True, **knobs)
    for seed, (tokens, pattern) in enumerate(((1, "random"), (23, "random"), (9, "same"),
                                              (5, "empty"))):
        row = check_case(Case("deamoe-small", SHAPE, tokens, pattern, seed=seed), tiles=tiles)
        assert row["finite"] and row["rel_err"] < 1e-4, row
    # the department down-projection read pair rows, and nothing was summed into S
    pairs_in = (decode.DEPT_DOWN_PAIRS.a_mode, decode.DEPT_DOWN_PAIRS.c_mode)
    assert any((s.a_mode, s.c_mode) == pairs_in and s.atomic for s in specs)
    assert not any(s.c_mode == decode.EXPERT_DOWN.c_mode and s.atomic for s in specs)


def _fp8_layer(tiles: DeaMoETiles, fmt: Fp8Format, monkeypatch) -> tuple[dict, int]:
    """check_case's row for `tiles` on w8a8 weights of `fmt`, and how many quantiser launches
    ran before its GEMMs."""
    from deamoe.kernels import fp8_quant

    launches, quantize_groups = [], fp8_quant.quantize_groups

    def counted(*args, **kw):
        launches.append(1)
        return quantize_groups(*args, **kw)
    monkeypatch.setattr(fp8_quant, "quantize_groups", counted)
    row = check_case(Case("deamoe-small", SHAPE, 7, "random", seed=3), tiles=tiles, fp8=fmt)
    return row, len(launches)


# the unchosen departments' rows of the department output are poisoned (NaN) and quantised too:
# the interpreter warns of their all-NaN max
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
def test_expert_down_stores_its_rows_quantised_for_the_department_down_projection(monkeypatch):
    # on '-pq' tiles every GEMM input is quantised in a launch before it (4); with pair rows and
    # '-qo' on expert_down (BLOCK_N: the 32-column group) dept_down reads them as stored: 3
    fmt = Fp8Format(32, 32, "fp8")
    pq, qo = TileConfig.parse("n32-k32-w4-s1-pq"), TileConfig.parse("n32-k32-w4-s1-pq-qo")
    every = DeaMoETiles(dept_up=pq, expert_up=pq, expert_down=pq, dept_down=pq)
    ref, n_ref = _fp8_layer(every, fmt, monkeypatch)
    pairs, n_pairs = _fp8_layer(dataclasses.replace(every, pair_dept_down=True), fmt, monkeypatch)
    stored, n_stored = _fp8_layer(dataclasses.replace(every, pair_dept_down=True, expert_down=qo),
                                  fmt, monkeypatch)
    assert (n_ref, n_pairs, n_stored) == (4, 4, 3)
    tol = tolerance("cpu", torch.float32, fmt)
    assert all(r["finite"] and r["rel_err"] < tol for r in (ref, pairs, stored)), (ref, pairs, stored)


@pytest.mark.parametrize("knobs, message", [
    ({"expert_down": TileConfig.parse("n32-k32-w4-s1-pq-qo")},
     "expert_down tile .* sums its output into S.* give pair_dept_down=1"),
    ({"expert_down": TileConfig.parse("n32-k32-w4-s1-pq-qs")},
     "expert_down tile .* sums its output into S"),
    ({"pair_dept_down": True, "expert_down": TileConfig.parse("n32-k32-w4-s1-pq-qs")},
     "'-qs' with pair_dept_down is not built"),
    ({"pair_dept_down": True, "expert_down": TileConfig.parse("n32-k32-w4-s1-pq-qo"),
      "dept_down": TileConfig.parse("n32-k64-w4-s1-pq")},
     "dept_down tile .* reads expert_down's '-qo' output .* BLOCK_K must divide 32"),
], ids=["qo-into-S", "qs-into-S", "qs-pairs", "wide-reader"])
def test_tiles_the_pair_rows_cannot_take_are_refused_when_made(knobs, message):
    with pytest.raises(ValueError, match=message):
        DeaMoETiles(**knobs)


def test_pair_rows_need_an_operator_the_kernel_applies():
    shape = dataclasses.replace(SHAPE, operator="rmsnorm")
    with pytest.raises(ValueError, match="pair_dept_down needs a fused operator"):
        check_case(Case("deamoe-rmsnorm", shape, 3, "random", seed=0),
                   tiles=DeaMoETiles(pair_dept_down=True))
