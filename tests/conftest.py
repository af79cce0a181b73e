"""Shared by every test: import the package before anything else, so that without a CUDA GPU
TRITON_INTERPRET=1 is set before a test module's own imports (transformers, torch._inductor) load
Triton."""

import deamoe  # noqa: F401
