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


def side_stream(device: torch.device, i: int) -> torch.cuda.Stream:
    """The i-th side stream of a CUDA device (made once, reused by every layer)."""
    key = (device.index, i)
    if key not in _SIDE:
        _SIDE[key] = torch.cuda.Stream(device)
    return _SIDE[key]


def run_parallel(sequences: Sequence[Sequence[Callable[[], object]]], device) -> None:
    device = torch.device(device)
    if device.type != "cuda" or len(sequences) == 1:
        for seq in sequences:
            for launch in seq:
                launch()
        return
    main = torch.cuda.current_stream(device)
    sides = [side_stream(device, i) for i in range(len(sequences) - 1)]
    for side in sides:
        side.wait_stream(main)  # fork: after everything queued so far (align)
    for seq, stream in zip(sequences, [main, *sides]):
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for side in sides:
        main.wait_stream(side)  # join: what follows reads the summed output


def run_forked(first: Sequence[Callable[[], object]], beside: Sequence[Callable[[], object]],
               after_first: Sequence[Sequence[Callable[[], object]]],
               after_both: Sequence[Sequence[Callable[[], object]]], device) -> None:
    """`first` on the current stream and `beside` on a side stream, both from here; then each of
    `after_first` on its own stream once `first` is done (it does not wait for `beside`), and
    each of `after_both` once both are done; everything joined back into the current stream.
    DeaMoE's dense_parts: first = the routing, beside = the dense department GEMM
    of some parts, after_first = the other parts, which start beside the dense GEMM's tail.
    Off CUDA: first, beside, after_first, after_both, one after another (the same result)."""
    device = torch.device(device)
    if device.type != "cuda":
        for seq in [first, beside, *after_first, *after_both]:
            for launch in seq:
                launch()
        return
    main = torch.cuda.current_stream(device)
    n_side = 1 + max(len(after_first) - 1, 0) + max(len(after_both) - 1, 0)
    sides = [side_stream(device, i) for i in range(n_side)]
    beside_stream, spare = sides[0], iter(sides[1:])
    beside_stream.wait_stream(main)  # fork: after everything queued so far
    with torch.cuda.stream(beside_stream):
        for launch in beside:
            launch()
    for launch in first:
        launch()
    done_first = torch.cuda.Event()
    done_first.record(main)
    streams = []
    for i, seq in enumerate(after_first):  # the first one continues on the current stream
        stream = main if i == 0 else next(spare)
        if stream is not main:
            stream.wait_event(done_first)
        streams.append((stream, seq))
    for i, seq in enumerate(after_both):  # the first one continues on the side stream
        stream = beside_stream if i == 0 else next(spare)
        stream.wait_event(done_first)
        if stream is not beside_stream:
            stream.wait_stream(beside_stream)
        streams.append((stream, seq))
    for stream, seq in streams:
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for side in sides:
        main.wait_stream(side)  # join: what follows reads the summed output
