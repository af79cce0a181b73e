"""DeaMoE: department-structured Mixture-of-Experts, and the pipeline that reproduces its paper.

Layers (lower never imports higher): config -> routing -> model -> analysis / kernels ->
train / serve -> eval / bench -> report -> cli.  See README.md.
"""

import os as _os

__version__ = "0.1.0"

# Without a CUDA GPU the Triton kernels run under Triton's interpreter.  Triton reads
# TRITON_INTERPRET when a function is decorated -- its own triton.language helpers are decorated
# when Triton is first imported, which transformers and torch._inductor do on their own -- so it
# is set here, when the package is first imported, not when deamoe.kernels is.
if "TRITON_INTERPRET" not in _os.environ:
    import torch as _torch

    if not _torch.cuda.is_available():
        _os.environ["TRITON_INTERPRET"] = "1"
