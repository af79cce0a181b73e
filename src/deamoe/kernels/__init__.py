"""Triton decode kernels: one grouped-GEMM primitive, the baseline fused MoE and DeaMoE on it.

  align.py          (token, slot) pairs grouped and padded per expert / department, on device
  grouped_gemm.py   the shared primitive (row modes + epilogues), the only GEMM code
  tile_config.py    one GEMM launch's tile (the search's knobs) and its name
  fp8.py, fp8_mma.py, fp8_quant.py   block-scaled FP8 weights, their main-loop steps, and the
                    activation quantiser launched before a GEMM
  fused_moe.py      baseline MoE layer (2 GEMMs)     } stage_benchmark.py times each launch
  deamoe_decode.py  DeaMoE layer (4 GEMMs)           }   of either layer alone (CUDA graph)
  streams.py        fork / join of launch sequences on CUDA streams (split_launches, dense_parts)
  shared_expert.py  always-active shared experts (dense SwiGLU, 2 GEMMs) beside either layer
  stream_read.py    streaming-read kernel            + stream_read_benchmark.py (roofline)
  routing_topk.py   single-launch routing (softmax top-k / group-limited), used by both layers
  battery.py        randomised correctness battery vs deamoe.model.layers.reference_forward
One layer's whole decode step on these kernels (router, routing, shared experts, tile picks) is
deamoe.decode; the benchmarks, GPU checks and A/B tools that time it live in deamoe.bench.
docs/kernels.md gives the design, the measurements behind each decision and the ideas rejected;
on FP8 weights docs/kernels-fp8.md, and the FP8 A/Bs and rejected ideas docs/kernels-fp8-search.md.

Without a CUDA GPU the kernels run under Triton's interpreter (TRITON_INTERPRET=1, set by
`import deamoe` before Triton can load: Triton reads it when a function is decorated, its own
triton.language helpers included): slow, but exact enough for the CI correctness battery at
small shapes.
"""

import os as _os

# whether the kernels run under that interpreter (their float32 MMA path, DOT_F32): read once
INTERPRETING = _os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
