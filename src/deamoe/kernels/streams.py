"""Run independent launch sequences side by side on CUDA streams (fork / join).

Used by the decode layers' `split_launches` option: the groups (departments, or experts for the
baseline) are split in contiguous parts whose GEMM chains share nothing but the atomically summed output,
so each part runs on its own stream and one part's launch ramp and tail overlap another's
work.  Captures into a CUDA graph as a fork/join; on the CPU (interpreter) it runs the
sequences one after another, which computes the same result.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

_SIDE: dict = {}


def split_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges cutting n groups into `parts` near-equal contiguous parts (no empty one)."""
    if parts < 1:
        raise ValueError(f"split_launches must be >= 1, got {parts}")
    cuts = [round(i * n / parts) for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def run_parallel(sequences: Sequence[Sequence[Callable[[], object]]], device) -> None:
    device = torch.device(device)
    if device.type != "cuda" or len(sequences) == 1:
        for seq in sequences:
            for launch in seq:
                launch()
        return
    main = torch.cuda.current_stream(device)
    sides = []
    for i in range(len(sequences) - 1):
        key = (device.index, i)
        if key not in _SIDE:
            _SIDE[key] = torch.cuda.Stream(device)
        sides.append(_SIDE[key])
    for side in sides:
        side.wait_stream(main)  # fork: after everything queued so far (align)
    for seq, stream in zip(sequences, [main, *sides]):
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for side in sides:
        main.wait_stream(side)  # join: what follows reads the summed output
