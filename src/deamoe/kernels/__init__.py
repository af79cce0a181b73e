"""Triton decode kernels: one grouped-GEMM primitive, the baseline fused MoE and DeaMoE on it.

  align.py          (token, slot) pairs grouped and padded per expert / department, on device
  grouped_gemm.py   the shared primitive (row modes + epilogues), the only GEMM code
  fused_moe.py      baseline MoE layer (2 GEMMs)          + fused_moe_benchmark.py
  deamoe_decode.py  DeaMoE layer (4 GEMMs)                + deamoe_decode_benchmark.py
  stream_read.py    streaming-read kernel: the measured memory roofline
NOTES.md records each kernel version's numbers on the H200.

Without a CUDA GPU the kernels run under Triton's interpreter (TRITON_INTERPRET=1, set here
before any kernel is decorated, since Triton reads it at decoration time): slow, but exact
enough for the CI correctness battery at small shapes.
"""

import os as _os

if "TRITON_INTERPRET" not in _os.environ:
    import torch as _torch

    if not _torch.cuda.is_available():
        _os.environ["TRITON_INTERPRET"] = "1"
