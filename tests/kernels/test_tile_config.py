"""TileConfig's names, as the tables, the settings and the knobs write them: every flag in its
place, a round trip through parse, and a clear error for a name out of order."""

from __future__ import annotations

import pytest

from deamoe.kernels.tile_config import TileConfig


@pytest.mark.parametrize("name", ["n64-k128-w4-s4", "n128-k64-w8-s3-tma", "n64-k64-w4-s3-swap",
                                  "n64-k64-w4-s3-tma-swap", "n128-k128-w4-s3-pq",
                                  "n128-k128-w4-s5-tma-swap-pq", "n64-k128-w4-s4-pq-nf",
                                  "n256-k128-w8-s4-tma-nf", "n64-k128-w4-s4-pq-qs",
                                  "n64-k128-w4-s6-tma-swap-pq-qs-nf", "n128-k128-w4-s3-qs"])
def test_a_name_parses_to_its_tile_and_back(name):
    t = TileConfig.parse(name)
    assert t.name == name
    assert t.preq == ("-pq" in name) and t.nfast == name.endswith("-nf") and t.tma == ("-tma" in name)
    assert t.qscale == ("-qs" in name) and not t.qout


def test_flags_out_of_order_or_unknown_name_the_form():
    for bad in ("n64-k128-w4-s4-pq-tma", "n64-k128-w4-s4-nf-pq", "n64-k128-w4", "n64-k128-w4-s4-x",
                "n64-k128-w4-q4", "n64-k128-w4-s4-qo-pq", "n64-k128-w4-s4-nf-qo",
                "n64-k128-w4-s4-qs-qo", "n64-k128-w4-s4-qo-qs", "n64-k128-w4-s4-nf-qs"):
        with pytest.raises(ValueError, match="then -pq, -qo, -nf"):
            TileConfig.parse(bad)
    assert TileConfig(128, 128, 4, 3, preq=True) == TileConfig.parse("n128-k128-w4-s3-pq")
    both = TileConfig.parse("n128-k128-w4-s3-tma-pq-qo-nf")
    assert (both.preq, both.qout, both.nfast, both.name) == (True, True, True, "n128-k128-w4-s3-tma-pq-qo-nf")


@pytest.mark.parametrize("name, says", [
    ("n24-k128-w4-s4", "block_n 24 must be a power of two >= 16"),
    ("n8-k128-w4-s4", "block_n 8 must be a power of two >= 16"),
    ("n64-k100-w4-s4", "block_k 100"), ("n64-k128-w3-s4", "num_warps 3"),
    ("n64-k128-w4-s0", "num_stages 0 must be >= 1")])
def test_counts_no_launch_can_take_are_refused_with_the_tile_named(name, says):
    # before, such a tile parsed and failed only in Triton, on the GPU (a NaN row or a traceback)
    with pytest.raises(ValueError, match=says) as err:
        TileConfig.parse(name)
    assert str(err.value).startswith(f"tile {name}: ")
