"""What the fast path's custom ops share: registering a launcher (a Triton kernel's, or eager
PyTorch's) as a torch.library custom op (opaque to torch.compile, so compiled layers call it with
the tensors eager mode would see, without a graph break), and the power-of-two block sizes.

A checkpoint's copy of the model modules (deamoe.model.remote_code) may be imported beside the
package's: registering an op name again registers the same code, or, where torch refuses a
second definition, the first registration is used.
"""

from __future__ import annotations

from typing import Callable

import torch


def register_op(name: str, launch: Callable, fake: Callable):
    """`launch` (its type hints give the schema) as op `name` ("deamoe::..."), `fake` its shapes."""
    try:
        op = torch.library.custom_op(name, launch, mutates_args=())
    except RuntimeError:  # registered by another copy of the calling module
        namespace, op_name = name.split("::")
        return getattr(getattr(torch.ops, namespace), op_name).default
    op.register_fake(fake)
    return op


def pow2(n: int, least: int = 2) -> int:
    """The smallest power of two >= n, and >= least (Triton's block sizes)."""
    return max(least, 1 << (n - 1).bit_length())
