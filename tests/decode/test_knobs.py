"""deamoe.decode.knobs: knob dicts into a layer's tiles, refused where the layer could not run them."""

from __future__ import annotations

import dataclasses

import pytest

from deamoe.decode.knobs import make_tiles
from deamoe.shapes import table1_row

SILU = table1_row("Qwen3-235B-A22B").deamoe
RMSNORM = dataclasses.replace(SILU, operator="rmsnorm")


@pytest.mark.parametrize("knobs, says", [
    ({"dept_up": "n128-k128-w4-s4-pq-qo"},
     r"operator rmsnorm .* dept_up \(tile n128-k128-w4-s4-pq-qo\) cannot store it quantised"),
    ({"dept_up": "n64-k128-w4-s4-pq-qs"},
     r"operator rmsnorm .* cannot store it with its absmax \('-qs'\)"),
    ({"pair_dept_down": 1}, "pair_dept_down needs a fused operator"),
])
def test_tiles_an_operator_outside_the_kernel_cannot_run_are_refused_when_made(knobs, says):
    # rmsnorm changes the department output after dept_up (it needs the whole row): before,
    # the layer refused these only at its first launch, on the GPU
    make_tiles(SILU, knobs)  # a fused operator runs them
    with pytest.raises(ValueError, match=says):
        make_tiles(RMSNORM, knobs)
