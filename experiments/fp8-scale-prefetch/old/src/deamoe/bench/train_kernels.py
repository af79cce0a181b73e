"""`bench train --parts kernels`: where one FFN layer's forward+backward spends its time, by
kernel -> OUT/train_layer_kernels.csv (the rows: deamoe.bench.train_bench.kernel_rows).

The layer section of `bench train` gives each path's total beside the grouped GEMMs alone and the
dense roofline; this part says what the rest is.  Each (shape, FFN, path) is run `reps` times
under torch.profiler after a warm-up (compilation included there), and every GPU kernel's time
is summed and put in one category by its name (CATEGORIES: the grouped GEMMs, the project's
Triton ops, sorts, gathers and scatters, inductor's fused element-wise kernels, copies).  On the
CPU (the tests' small shapes) the rows are aten operators' self times instead.

Columns: shape, ffn, path, category, kernel (the name, cut at 120 characters), calls (per layer
call), ms (per layer call), share (of the layer's kernel time), and provenance.
"""

from __future__ import annotations

import re

KERNEL_COLUMNS = ["shape", "ffn", "path", "category", "kernel", "calls", "ms", "share"]
# First match wins; names of CUDA kernels (cuBLAS/CUTLASS, Triton, ATen) and of aten operators.
CATEGORIES = [
    ("Triton mix_rows", r"_mix_kernel|deamoe::mix_rows"),
    ("Triton gather_sum", r"_gather_sum|deamoe::gather_sum"),
    ("grouped GEMM", r"gemm|cutlass|nvjet|xmma|wgmma|grouped_mm|aten::(mm|bmm|addmm|matmul)\b"),
    ("sort", r"sort|radix"),
    ("gather / scatter", r"index|scatter|gather|take"),
    ("fused element-wise (inductor)", r"^triton_"),
    ("copy / cast / fill", r"copy|cast|memcpy|memset|fill|cat\b|_to_copy|clone"),
    ("reduction", r"reduce|sum|cumsum|scan"),
]


def category(name: str) -> str:
    """The category of a kernel or operator name (CATEGORIES; 'other' where none matches)."""
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return label
    return "other"


def profile_kernels(run, reps: int) -> list[tuple[str, int, float]]:
    """(name, calls, total ms) of every GPU kernel (CPU: aten operator, self time) in `reps` runs."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for _ in range(reps):
            run()
        if cuda:
            torch.cuda.synchronize()
    out = []
    for e in prof.key_averages():
        if cuda:
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue  # host-side events: their kernels are listed on their own
            us = e.self_device_time_total
        else:
            if not e.key.startswith("aten::"):
                continue
            us = e.self_cpu_time_total
        if us > 0:
            out.append((e.key, e.count, us / 1e3))
    return out
