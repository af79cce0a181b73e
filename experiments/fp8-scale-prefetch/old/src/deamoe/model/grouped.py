"""Grouped matrix multiply for the PyTorch (training / reference) path.

Rows of `x` are grouped by expert (or department) in order; group g's rows multiply w[g]^T.
On a Hopper-class GPU in bf16 this is one `torch._grouped_mm` call (no host sync); elsewhere
(CPU, fp32, older GPUs) a loop over the non-empty groups.  The decode kernels in
deamoe.kernels have their own Triton primitive; this one serves training and evaluation.
"""

from __future__ import annotations

import torch


def _use_grouped_mm(x: torch.Tensor, w: torch.Tensor) -> bool:
    return (
        x.is_cuda
        and hasattr(torch, "_grouped_mm")
        and x.dtype == torch.bfloat16
        and w.dtype == torch.bfloat16
        and torch.cuda.get_device_capability(x.device)[0] >= 9
        and x.shape[-1] % 8 == 0
        and w.shape[-2] % 8 == 0
    )


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype grouped_mm multiplies x in: CUDA autocast's dtype where it is on, else x's."""
    if x.is_cuda and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return x.dtype


def grouped_mm(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """x [A, in] (rows grouped by group, counts[g] rows each), w [G, out, in] -> [A, out].

    sum(counts) may be less than A: the rows after the last group are not multiplied.  Their
    values in x do not matter, nor does the gradient the caller sends back for them (w's gradient
    reads only grouped rows); their rows of the result and of x's gradient are undefined, and the
    caller must not read them.  torch._grouped_mm leaves them uninitialised; here they are NaN,
    in the result and in x's gradient, so a caller that reads them fails its CPU tests instead of
    reading stale memory on the GPU."""
    dtype = compute_dtype(x)
    x, w = x.to(dtype), w.to(dtype)
    if _use_grouped_mm(x, w):
        offs = counts.cumsum(0).to(torch.int32)
        return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    out_dim = w.shape[-2]
    if x.shape[0] == 0:
        return x.new_zeros(0, out_dim)
    sizes = counts.tolist()
    rest = x.shape[0] - sum(sizes)
    # unbind once: indexing w[g] per group would make backward allocate a full-size gradient of
    # w for every group; unbind's backward stacks the per-group gradients in one pass.
    weights = w.unbind(0)
    *groups, tail = torch.split(x, sizes + [rest])
    pieces = [rows @ weights[g].transpose(0, 1) for g, rows in enumerate(groups) if sizes[g]]
    if rest:  # NaN that also flows back to x's tail rows (NaN times any gradient is NaN)
        pieces.append((tail[:, :1] * float("nan")).expand(rest, out_dim))
    return torch.cat(pieces, dim=0)
