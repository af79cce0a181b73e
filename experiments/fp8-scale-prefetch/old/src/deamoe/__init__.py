"""DeaMoE: department-structured Mixture-of-Experts, and the pipeline that reproduces its paper.

Layers (lower never imports higher): facts (paper, shapes, routing, ...) -> model -> kernels ->
decode -> stages (analysis, train, eval, serve) -> bench -> report -> commands; no import
cycles (tests/test_imports.py).  See docs/architecture.md.
"""

import os as _os

__version__ = "0.1.0"

# Without a CUDA GPU the Triton kernels run under Triton's interpreter.  Triton reads
# TRITON_INTERPRET when a function is decorated -- its own triton.language helpers are decorated
# when Triton is first imported, which transformers and torch._inductor do on their own -- so it
# is set here, when the package is first imported, not when deamoe.kernels is.  Where no GPU
# device node exists (NVIDIA, ROCm, WSL) torch cannot see a GPU either, and importing torch just to
# be told so would cost ~3 s in every process that imports the package without needing torch
# (the Snakefile's config check, so every `snakemake` call and every cluster job's start).
_GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")
if "TRITON_INTERPRET" not in _os.environ:
    if not any(_os.path.exists(node) for node in _GPU_NODES):
        _os.environ["TRITON_INTERPRET"] = "1"
    else:
        import torch as _torch

        if not _torch.cuda.is_available():
            _os.environ["TRITON_INTERPRET"] = "1"
