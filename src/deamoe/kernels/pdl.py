"""Programmatic dependent launch (PDL) between the Triton launches of one decode layer.

Why: a decode layer is a chain of short memory-bound launches (routing -> align -> 2 or 4 GEMMs).
Between two launches the GPU drains the last wave of the first (SMs idle) and then ramps the
next one up (launch latency, first loads in flight): a few microseconds per boundary, paid
twice more by DeaMoE (four GEMMs) than by the baseline (two).  With PDL (sm_90+) a launch may
start while its predecessor is still running: its programs do the work that does not depend
on the predecessor (locate their group, prefetch the first weight tiles into L2), then wait
with `griddepcontrol.wait` for the predecessor to finish and flush its memory.

Rule that keeps it safe (every kernel here follows it): a program calls `gdc_wait` before it
reads anything the previous launch writes and before it writes anything, and calls
`gdc_launch_dependents` only after its `gdc_wait`.  Then launch n+1 can start only once launch
n-1 has completed, so data written two or more launches back (e.g. the alignment, for every
GEMM after the first) may be read before the wait.  Non-Triton launches in between (cuBLAS
router GEMM, the final cast) simply serialise as usual.

Both layers get it alike (it lives in the shared launch code).  Measured on the H200 (NOTES.md
v7): inside the layer's CUDA graph it changed neither layer's time beyond the +-1% run-to-run
spread, so it is OFF by default; DEAMOE_PDL=1 turns it on (checked correct in CUDA graphs by
scripts/h200_v7_preflight.py).  Never on under Triton's interpreter or below sm_90.
"""

from __future__ import annotations

import functools
import os

import torch

_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _capable(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def pdl_enabled(t: torch.Tensor) -> bool:
    """Whether launches on `t`'s device use PDL (env DEAMOE_PDL=1; default off)."""
    if _INTERPRETING or not t.is_cuda or os.environ.get("DEAMOE_PDL", "0") in ("0", ""):
        return False
    return _capable(t.device.index if t.device.index is not None else torch.cuda.current_device())


def prefetch_enabled() -> bool:
    """Whether GEMMs prefetch their first weight tiles into L2 before waiting (DEAMOE_PREFETCH)."""
    return os.environ.get("DEAMOE_PREFETCH", "1") not in ("0", "")


def launch_kwargs(t: torch.Tensor) -> tuple[bool, dict]:
    """(USE_PDL constexpr, extra launch kwargs) for a kernel whose data live on t's device."""
    on = pdl_enabled(t)
    return on, ({"launch_pdl": True} if on else {})
