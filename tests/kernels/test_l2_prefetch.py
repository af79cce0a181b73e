"""The L2 prefetch switch (kernels/l2_prefetch.py, deamoe_decode.PREFETCH_BLOCKS; NOTES.md v46).

A hint that never changes a result: on the CPU it is skipped (no inline PTX under the
interpreter), so the layer with the switch on must still equal the reference; on an sm_90+ GPU
the same case runs with the prefetch launched."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.bench.microbench import module_switches
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.battery import Case, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.l2_prefetch import available, prefetch_groups

SHAPE = small_shapes()["deamoe-small"]
TILES = DeaMoETiles(dense_dept_up=True, split_launches=2)


def test_not_available_without_a_hopper_gpu():
    assert available("cpu") is False


def test_switch_on_leaves_the_layer_equal_to_the_reference_on_the_cpu():
    with module_switches({"deamoe.kernels.deamoe_decode.PREFETCH_BLOCKS": 3}):
        row = check_case(Case("pf", SHAPE, 5, "random", seed=2), tiles=TILES)
    assert row["ok"], row


def test_bad_weights_are_rejected():
    ids = torch.zeros(2, 1, dtype=torch.long)
    (al,) = align(ids, AlignSpec(n_groups=4, block_m=16))
    w = torch.zeros(4, 8, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="one or two"):
        prefetch_groups((), al, 1)
    with pytest.raises(ValueError, match="one shape"):
        prefetch_groups((w, torch.zeros(4, 8, 16, dtype=torch.bfloat16)), al, 1)
    with pytest.raises(ValueError, match="multiple of 16"):
        prefetch_groups((torch.zeros(4, 3, 3, dtype=torch.bfloat16),), al, 1)


@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and available("cuda")),
                    reason="needs an sm_90+ CUDA GPU")
@pytest.mark.parametrize("blocks", [1, 64])
def test_gpu_prefetch_leaves_the_layer_correct(blocks):
    with module_switches({"deamoe.kernels.deamoe_decode.PREFETCH_BLOCKS": blocks}):
        for tokens in (1, 37):
            row = check_case(Case("pf", SHAPE, tokens, "random", seed=tokens), "cuda",
                             torch.bfloat16, tiles=TILES)
            assert row["ok"], row
