"""Run independent launch sequences side by side on CUDA streams (fork / join).

Used by the decode layers' `split_launches` option: the groups (departments, or experts for the
baseline) are split in contiguous parts whose GEMM chains share nothing but the atomically summed output,
so each part runs on its own stream and one part's launch ramp and tail overlap another's
work.  `run_staggered` (DeaMoE's stagger_dept_up) adds events: part i's chain waits for its
own producer launch only.  Captures into a CUDA graph as a fork/join; on the CPU (interpreter)
it runs the sequences one after another, which computes the same result.

Priorities: a side stream may be created with a higher priority (HIGH_PRIORITY).  The block
scheduler then gives free SMs to that stream's pending programs before the pending programs
of lower-priority kernels -- inside a CUDA graph too, since PyTorch instantiates graphs with
cudaGraphInstantiateFlagUseNodePriority and a captured kernel node keeps the priority of the
stream it was captured on (NOTES.md v23).  It does not preempt programs already running.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

_SIDE: dict = {}
# lower runs first; torch clamps it into the device's range (0 .. -5 on recent GPUs)
HIGH_PRIORITY = -1


def split_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges cutting n groups into `parts` near-equal contiguous parts (no empty one)."""
    if parts < 1:
        raise ValueError(f"split_launches must be >= 1, got {parts}")
    cuts = [round(i * n / parts) for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def _side(device: torch.device, i: int, priority: int = 0) -> torch.cuda.Stream:
    key = (device.index, i, priority)
    if key not in _SIDE:
        _SIDE[key] = torch.cuda.Stream(device, priority=priority)
    return _SIDE[key]


def run_parallel(sequences: Sequence[Sequence[Callable[[], object]]], device,
                 priorities: Sequence[int] | None = None) -> None:
    """sequences[0] on this stream, each other one on a side stream forked after everything
    queued so far; all joined at the end.  priorities[i] (i >= 1): sequence i's stream priority
    (0 normal, HIGH_PRIORITY first); sequence 0 keeps this stream's."""
    device = torch.device(device)
    if priorities is not None and len(priorities) != len(sequences):
        raise ValueError(f"run_parallel: {len(priorities)} priorities for {len(sequences)} sequences")
    if device.type != "cuda" or len(sequences) == 1:
        for seq in sequences:
            for launch in seq:
                launch()
        return
    main = torch.cuda.current_stream(device)
    prio = list(priorities or [0] * len(sequences))
    sides = [_side(device, i, prio[i + 1]) for i in range(len(sequences) - 1)]
    for side in sides:
        side.wait_stream(main)  # fork: after everything queued so far (align)
    for seq, stream in zip(sequences, [main, *sides]):
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for side in sides:
        main.wait_stream(side)  # join: the cast reads the summed output


def run_staggered(producers: Sequence[Callable[[], object]], head: Sequence[Callable[[], object]],
                  consumers: Sequence[Sequence[Callable[[], object]]], device,
                  priority: int = 0) -> None:
    """producers[i] makes what consumers[i] reads.  The producers run one after another on a
    side stream, `head` beside them, and consumer i (consumer 0 on this stream, the others on
    side streams of their own) starts once `head` and producers[i] are done; all joined at the
    end.  So a producer runs while the consumers before it do.  priority: the stream priority
    of the producers and the head (HIGH_PRIORITY: their programs get SMs before the consumers'
    pending ones; else the consumer that started first fills the GPU and the next producer
    waits behind it, NOTES.md v15b).  On the CPU: producers, head, consumers, in order (the
    same result)."""
    device = torch.device(device)
    if len(producers) != len(consumers):
        raise ValueError(f"run_staggered: {len(producers)} producers vs {len(consumers)} consumers")
    if device.type != "cuda":
        for launch in [*producers, *head, *(launch for seq in consumers for launch in seq)]:
            launch()
        return
    main = torch.cuda.current_stream(device)
    made = _side(device, 0, priority)
    made.wait_stream(main)  # fork: after everything queued so far
    ready = []
    with torch.cuda.stream(made):
        for launch in producers:
            launch()
            ready.append(torch.cuda.Event())
            ready[-1].record(made)
    if priority:  # the head on a stream of the producers' priority too
        fast = _side(device, 1, priority)
        fast.wait_stream(main)
        with torch.cuda.stream(fast):
            for launch in head:
                launch()
        main.wait_stream(fast)
    else:
        for launch in head:
            launch()
    sides = [_side(device, i) for i in range(1, len(consumers))]
    for stream, seq, event in zip([main, *sides], consumers, ready):
        if stream is not main:
            stream.wait_stream(main)  # after head
        stream.wait_event(event)
        with torch.cuda.stream(stream):
            for launch in seq:
                launch()
    for stream in [made, *sides]:
        main.wait_stream(stream)  # join
