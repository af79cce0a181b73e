"""The training path of both FFN layers: sort-based, static shapes, no host synchronisation.

The layers' own forward (deamoe.model.layers) groups the assignments with `nonzero()` and
`bincount` (both read the device on the host) and combines them with `index_add_` (atomics in the
forward and a scatter in every gather's backward).  This path computes the same function with
shapes fixed by (tokens, k) alone, so it runs inside torch.compile and a CUDA graph:

  * every (token, slot) row is placed by one stable argsort; moving rows between the token-major
    and the grouped layout is a gather through the permutation or its inverse, forward and
    backward (`_Dispatch`, `_Permute`), never a scatter-add;
  * counts per group come from a scatter_add of ones (a fixed-size result, unlike bincount);
  * gate and up share one grouped GEMM (their weights concatenated along the output rows), and
    the routing weight multiplies the activation before the down projection (linear, so exact):
    the combine is then a plain sum over a token's k rows;
  * DeaMoE's (token, department) pairs are a fixed `slots` per token (the router keeps k_dept
    departments): a token whose experts span fewer departments fills the rest with unused
    departments whose rows carry zero weight (stage 3 sums nothing into them).  Assignments reach
    their pair row, and expert results their pair sum, through a [T, k, slots] one-hot batched
    matmul (dense and deterministic) instead of a gather with a scatter-add backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deamoe.model.grouped import grouped_mm
from deamoe.routing import expert_counts


class _Permute(torch.autograd.Function):
    """rows[idx] for a permutation idx; the backward gathers through the inverse permutation."""

    @staticmethod
    def forward(ctx, rows, idx, inv):
        ctx.save_for_backward(inv)
        return rows.index_select(0, idx)

    @staticmethod
    def backward(ctx, grad):
        (inv,) = ctx.saved_tensors
        return grad.index_select(0, inv), None, None


class _Dispatch(torch.autograd.Function):
    """x [T, h] -> [T*S, h]: row p is x[order[p] // S] (each token copied to its S slots, in the
    grouped order).  Its adjoint is `_Combine`: the backward sums each token's S slot gradients."""

    @staticmethod
    def forward(ctx, x, order, inv, slots):
        ctx.save_for_backward(inv)
        ctx.slots = slots
        return x.index_select(0, torch.div(order, slots, rounding_mode="floor"))

    @staticmethod
    def backward(ctx, grad):
        (inv,) = ctx.saved_tensors
        return _sum_slots(grad, inv, ctx.slots), None, None, None


class _Combine(torch.autograd.Function):
    """[T*S, h] grouped rows -> [T, h]: the sum of each token's S rows (the adjoint of _Dispatch)."""

    @staticmethod
    def forward(ctx, rows, order, inv, slots):
        ctx.save_for_backward(order)
        ctx.slots = slots
        return _sum_slots(rows, inv, slots)

    @staticmethod
    def backward(ctx, grad):
        (order,) = ctx.saved_tensors
        rows = grad.index_select(0, torch.div(order, ctx.slots, rounding_mode="floor"))
        return rows, None, None, None


def _sum_slots(rows: torch.Tensor, inv: torch.Tensor, slots: int) -> torch.Tensor:
    return rows.index_select(0, inv).view(-1, slots, rows.shape[-1]).sum(1)


def sort_groups(group: torch.Tensor, n_group: int):
    """group [N] int64 -> (order, inverse permutation, rows per group [n_group]), sync-free."""
    order = group.argsort(stable=True)
    inv = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    return order, inv, expert_counts(group, n_group)


def fast_moe(layer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The routed part of MoE.forward: x [T, h], ids/weights [T, k] -> [T, h]."""
    T, k = ids.shape
    f = layer.shape.h_ffn
    order, inv, counts = sort_groups(ids.reshape(-1), layer.shape.n_expert)
    xs = _Dispatch.apply(x, order, inv, k)
    gu = grouped_mm(xs, torch.cat([layer.gate_proj, layer.up_proj], dim=1), counts)
    w = weights.reshape(-1).index_select(0, order).unsqueeze(1)
    act = F.silu(gu[:, :f]) * gu[:, f:] * w.to(gu.dtype)
    y = grouped_mm(act, layer.down_proj, counts)
    return _Combine.apply(y, order, inv, k)


def department_slots(ids: torch.Tensor, n_dept: int, experts_per_dept: int, slots: int):
    """Per token, `slots` distinct departments: the ones its experts use (ascending), then unused
    ones.  Returns (pair_dept [T, slots], onehot [T, k, slots]: assignment j sits in slot s)."""
    dept = torch.div(ids, experts_per_dept, rounding_mode="floor")
    used = torch.zeros(ids.shape[0], n_dept, device=ids.device).scatter_(1, dept, 1.0)
    rank = torch.arange(n_dept, 0, -1, device=ids.device, dtype=used.dtype)  # ties: lower dept first
    pair_dept = (used * (n_dept + 1) + rank).topk(slots, dim=1).indices
    onehot = dept.unsqueeze(2) == pair_dept.unsqueeze(1)
    return pair_dept, onehot


def fast_deamoe(layer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, slots: int) -> torch.Tensor:
    """The routed part of DeaMoE.forward; `slots` must be at least the departments a token uses."""
    s = layer.shape
    T, k = ids.shape
    f = s.h_ffn
    pair_dept, onehot = department_slots(ids, s.n_dept, s.experts_per_dept, slots)
    porder, pinv, dcounts = sort_groups(pair_dept.reshape(-1), s.n_dept)
    eorder, einv, ecounts = sort_groups(ids.reshape(-1), s.n_expert)

    # Stage 1: a_g, a_u once per (token, department), grouped by department.
    xd = _Dispatch.apply(x, porder, pinv, slots)
    a = grouped_mm(xd, torch.cat([layer.dept_gate, layer.dept_up], dim=1), dcounts)
    a = layer.sigma(a.view(-1, 2, f)).view(-1, 2 * f)

    # Stage 2: each assignment reads its pair's row (one-hot bmm), grouped by expert.
    a = _Permute.apply(a, pinv, porder).view(T, slots, 2 * f)
    a = torch.bmm(onehot.to(a.dtype), a).view(T * k, 2 * f)
    # gathered per half: each grouped GEMM gets a contiguous input
    a_g, a_u = (_Permute.apply(half, eorder, einv) for half in (a[:, :f], a[:, f:]))
    y = F.silu(grouped_mm(a_g, layer.expert_gate, ecounts)) * grouped_mm(a_u, layer.expert_up, ecounts)
    z = layer.sigma(grouped_mm(y, layer.expert_down, ecounts))

    # Stage 3: weighted expert results summed per pair (one-hot bmm), then W_d once per pair.
    z = _Permute.apply(z, einv, eorder).view(T, k, f)
    wsel = (onehot * weights.unsqueeze(2)).to(z.dtype)  # [T, k, slots]
    zsum = torch.bmm(wsel.transpose(1, 2), z).view(T * slots, f)
    zsum = _Permute.apply(zsum, porder, pinv)
    o = grouped_mm(zsum, layer.dept_down, dcounts)
    return _Combine.apply(o, porder, pinv, slots)
