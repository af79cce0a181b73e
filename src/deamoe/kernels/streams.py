"""Run independent launch sequences side by side on CUDA streams (fork / join).

Used by the decode layers' `split_launches` option: the groups (departments, or experts for the
baseline) are split in contiguous parts whose GEMM chains share nothing but the atomically summed output,
so each part runs on its own stream and one part's launch ramp and tail overlap another's
work.  `run_staggered` (DeaMoE's stagger_dept_up) adds events: part i's chain waits for its
own producer launch only.  Captures into a CUDA graph as a fork/join; on the CPU (interpreter)
it runs the sequences one after another, which computes the same result.
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


def _side(device: torch.device, i: int) -> torch.cuda.Stream:
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
    sides = [_side(device, i) for i in range(len(sequences) - 1)]
    for side in sides:
        side.wait_stream(main)  # fork: after everything queued so far (align)
    for seq, stream in zip(sequences, [main, *sides]):
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for side in sides:
        main.wait_stream(side)  # join: the cast reads the summed output


def run_staggered(producers: Sequence[Callable[[], object]], head: Sequence[Callable[[], object]],
                  consumers: Sequence[Sequence[Callable[[], object]]], device) -> None:
    """producers[i] makes what consumers[i] reads.  The producers run one after another on a
    side stream, `head` on this stream beside them, and consumer i (consumer 0 on this stream,
    the others on side streams of their own) starts once `head` and producers[i] are done; all
    joined at the end.  So a producer runs while the consumers before it do.  On the CPU:
    producers, head, consumers, in order (the same result)."""
    device = torch.device(device)
    if len(producers) != len(consumers):
        raise ValueError(f"run_staggered: {len(producers)} producers vs {len(consumers)} consumers")
    if device.type != "cuda":
        for launch in [*producers, *head, *(launch for seq in consumers for launch in seq)]:
            launch()
        return
    main = torch.cuda.current_stream(device)
    streams = [_side(device, i) for i in range(len(consumers))]  # 0: producers, then consumers
    streams[0].wait_stream(main)  # fork: after everything queued so far
    ready = []
    with torch.cuda.stream(streams[0]):
        for launch in producers:
            launch()
            ready.append(torch.cuda.Event())
            ready[-1].record(streams[0])
    for launch in head:
        launch()
    for stream, seq, event in zip([main, *streams[1:]], consumers, ready):
        if stream is not main:
            stream.wait_stream(main)  # after head
        stream.wait_event(event)
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for stream in streams:
        main.wait_stream(stream)  # join
