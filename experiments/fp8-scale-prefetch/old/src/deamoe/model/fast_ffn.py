"""The training path of both FFN layers: sort-based, static shapes, no host synchronisation.

The layers' own forward (deamoe.model.layers) groups the assignments with `nonzero()` and
`bincount` (both read the device on the host) and combines them with `index_add_` (atomics in the
forward and a scatter in every gather's backward).  This path computes the same function with
shapes fixed by (tokens, k) alone, so it runs inside torch.compile and a CUDA graph (DeaMoE's
index math as an opaque op in the compiled layer: see department_index):

  * every (token, slot) row is placed by one stable argsort; moving rows between the token-major
    and the grouped layout is a gather through the permutation or its inverse, forward and
    backward (`_Dispatch`, `_Permute`), never a scatter-add;
  * counts per group come from a scatter_add of ones (a fixed-size result, unlike bincount);
  * gate and up share one grouped GEMM (their weights concatenated along the output rows), and
    the routing weight multiplies the activation before the down projection (linear, so exact):
    the combine is then a plain sum over a token's k rows;
  * DeaMoE's (token, department) pairs are a fixed `slots` per token (the router keeps k_dept
    departments): a token whose experts span fewer departments fills the rest with padding
    pairs, which sort after every real pair and which the department GEMMs skip (see
    fast_deamoe: all of them read one row of zeros).  Assignments read
    their pair row by one gather (`_Expand`); sums over a pair's assignments (stage 3's forward,
    that gather's backward) are per-token products with the [T, k, slots] one-hot or weighted
    matrix (deamoe.model.mix_rows: dense, deterministic) instead of a scatter-add;
  * the input is cast to the GEMMs' dtype (autocast's) before it is copied to its rows, and the
    weights before they are stacked, so no copy moves float32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from deamoe.model.gather_sum import gather_sum
from deamoe.model.grouped import compute_dtype, grouped_mm
from deamoe.model.mix_rows import Mix, mix
from deamoe.model.triton_ops import register_op
from deamoe.routing import expert_counts


class _Permute(torch.autograd.Function):
    """rows[idx] for a permutation idx; the backward gathers through `inv`: the inverse
    permutation, except that fast_deamoe's padding pairs all read one finite row (any finite
    row will do: their rows reach the result only through zero weights)."""

    @staticmethod
    def forward(ctx, rows, idx, inv):
        ctx.save_for_backward(inv)
        return rows.index_select(0, idx)

    @staticmethod
    def backward(ctx, grad):
        (inv,) = ctx.saved_tensors
        return grad.index_select(0, inv), None, None


class _Dispatch(torch.autograd.Function):
    """x [T, h] -> [T*S, h] in `dtype`: row p is x[order[p] // S] (each token copied to its S
    slots, in the grouped order).  x is cast before the copy (S times fewer rows to cast; the
    same values).  The backward sums each token's S slot gradients in x's own dtype, as the
    cast's backward followed by `_Combine` would; slot t*S + s reads grouped row inv[t*S + s]
    (the inverse permutation of order, or a padding slot's zero row)."""

    @staticmethod
    def forward(ctx, x, order, inv, slots, dtype):
        ctx.save_for_backward(inv)
        ctx.slots, ctx.x_dtype = slots, x.dtype
        return x.to(dtype).index_select(0, torch.div(order, slots, rounding_mode="floor"))

    @staticmethod
    def backward(ctx, grad):
        (inv,) = ctx.saved_tensors
        return gather_sum(grad, inv, ctx.slots, ctx.x_dtype), None, None, None, None


class _Combine(torch.autograd.Function):
    """[T*S, h] grouped rows -> [T, h]: the sum of each token's S rows, slot t*S + s read from row
    inv[t*S + s] (the adjoint of _Dispatch).  The backward gives every grouped row its token's
    gradient, padding rows included (finite; see _department_rows for why they reach nothing)."""

    @staticmethod
    def forward(ctx, rows, order, inv, slots):
        ctx.save_for_backward(order)
        ctx.slots = slots
        return gather_sum(rows, inv, slots)

    @staticmethod
    def backward(ctx, grad):
        (order,) = ctx.saved_tensors
        rows = grad.index_select(0, torch.div(order, ctx.slots, rounding_mode="floor"))
        return rows, None, None, None


def sort_groups(group: torch.Tensor, n_group: int):
    """group [N] int64 -> (order, inverse permutation, rows per group [n_group]), sync-free."""
    order = group.argsort(stable=True)
    inv = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    return order, inv, expert_counts(group, n_group)


def _stacked(dtype: torch.dtype, *weights: torch.Tensor) -> torch.Tensor:
    """[G, out, in] weights stacked along their output rows, each cast first (so the copy moves
    the narrow dtype): one grouped GEMM then computes all of them."""
    return torch.cat([w.to(dtype) for w in weights], dim=1)


def fast_moe(layer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The routed part of MoE.forward: x [T, h], ids/weights [T, k] -> [T, h]."""
    T, k = ids.shape
    f, dtype = layer.shape.h_ffn, compute_dtype(x)
    order, inv, counts = sort_groups(ids.reshape(-1), layer.shape.n_expert)
    xs = _Dispatch.apply(x, order, inv, k, dtype)
    gu = grouped_mm(xs, _stacked(dtype, layer.gate_proj, layer.up_proj), counts)
    # unbind, not slicing: its backward writes both halves' gradients in one stacked tensor
    g, u = gu.view(-1, 2, f).unbind(1)
    w = weights.reshape(-1).index_select(0, order).unsqueeze(1)
    y = grouped_mm(F.silu(g) * u * w.to(gu.dtype), layer.down_proj, counts)
    return _Combine.apply(y, order, inv, k)


def department_slots(ids: torch.Tensor, n_dept: int, experts_per_dept: int, slots: int):
    """Per token, `slots` (token, group) pairs: the departments its experts use (ascending), then
    padding pairs, group n_dept.  Returns (pair_group [T, slots], slot [T, k]: the slot of
    assignment j).  Ranks by running counts, not a sort: element-wise work that torch.compile
    fuses."""
    dept = torch.div(ids, experts_per_dept, rounding_mode="floor")
    used = torch.zeros(ids.shape[0], n_dept, dtype=torch.int64, device=ids.device).scatter_(1, dept, 1)
    n_used = used.sum(1, keepdim=True)
    # unused departments rank after the used ones, so that every position receives one department
    position = torch.where(used.bool(), used.cumsum(1) - 1, n_used + (1 - used).cumsum(1) - 1)
    every = torch.arange(n_dept, device=ids.device).expand_as(used)
    pair_dept = torch.empty_like(used).scatter_(1, position, every)[:, :slots]
    padding = torch.arange(slots, device=ids.device) >= n_used
    return pair_dept.masked_fill(padding, n_dept), position.gather(1, dept)


def _slot_sum(sel: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """sel [T, k, S], rows [T, k, d] -> [T, S, d]: per token, slot s sums sel[j, s] * rows[j]."""
    return Mix.apply(sel.transpose(1, 2).to(rows.dtype), rows)


class _Expand(torch.autograd.Function):
    """Pair rows [P, d] (department order) -> assignment rows [N, d] (expert order): row n is
    rows[src[n]], one gather.  Its backward sums each pair's assignments' gradients: into token
    order (einv), the one-hot slot sum, into department order (porder); dense, deterministic."""

    @staticmethod
    def forward(ctx, rows, src, einv, porder, onehot):
        ctx.save_for_backward(einv, porder, onehot)
        return rows.index_select(0, src)

    @staticmethod
    def backward(ctx, grad):
        einv, porder, onehot = ctx.saved_tensors
        T, k, S = onehot.shape
        per_slot = mix(onehot.transpose(1, 2).to(grad.dtype), grad.index_select(0, einv).view(T, k, -1))
        return per_slot.view(T * S, -1).index_select(0, porder), None, None, None, None


def _department_rows(pair_group: torch.Tensor, n_dept: int):
    """Sort the pairs by group, padding (group n_dept) last.  Returns (order, read, counts):
    `read` [T*S] is the grouped row each token-major pair reads (the inverse permutation, but
    every padding pair reads row z, the first padding row), counts [n_dept] the rows each
    department's GEMM multiplies: its real pairs, and for the last department also row z where
    padding exists.  The GEMMs skip the other padding rows (left undefined by grouped_mm); row z
    gives the padding pairs a row of zeros, forward and backward, without a masking pass: its
    stage 3 input is zero (no assignment's weight reaches it), so its output is; its stage 1
    result is read by no assignment, so its gradient is zero and so is its x-gradient row.  The
    stage 3 gradient row z receives is finite and meets only zero one-hot weights, in the slot
    sum's backward and in W_d's gradient (whose factor there is z's zero input)."""
    flat = pair_group.reshape(-1)
    order, inv, counts = sort_groups(flat, n_dept + 1)
    counts, n_pad = counts[:n_dept].clone(), counts[n_dept]
    first_pad = flat.numel() - n_pad
    counts[-1] += (n_pad > 0).to(counts.dtype)
    return order, torch.where(flat == n_dept, first_pad, inv), counts


class DepartmentIndex(NamedTuple):
    """fast_deamoe's routing-index tensors for one batch of assignments ids [T, k]."""
    onehot: torch.Tensor  # [T, k, slots] bool: assignment j of token t sits in slot s
    porder: torch.Tensor  # [T*slots] pairs in department order (padding last)
    pread: torch.Tensor  # [T*slots] the grouped row each token-major pair reads
    dcounts: torch.Tensor  # [n_dept] rows each department's GEMMs multiply
    eorder: torch.Tensor  # [T*k] assignments in expert order
    einv: torch.Tensor  # [T*k] its inverse permutation
    ecounts: torch.Tensor  # [n_expert]
    src: torch.Tensor  # [T*k] the department row each expert-order assignment reads


def _index_tensors(ids: torch.Tensor, n_dept: int, experts_per_dept: int, n_expert: int,
                   slots: int) -> list[torch.Tensor]:
    T = ids.shape[0]
    pair_group, slot = department_slots(ids, n_dept, experts_per_dept, slots)
    onehot = slot.unsqueeze(2) == torch.arange(slots, device=ids.device)
    porder, pread, dcounts = _department_rows(pair_group, n_dept)
    eorder, einv, ecounts = sort_groups(ids.reshape(-1), n_expert)
    # the pair of token t's slot holding assignment j is row pread[t * slots + slot] (always a
    # real pair); src lists it per assignment in expert order
    pair = torch.arange(T, device=ids.device).unsqueeze(1) * slots + slot
    src = pread.index_select(0, pair.reshape(-1).index_select(0, eorder))
    return [onehot, porder, pread, dcounts, eorder, einv, ecounts, src]


def _index_shapes(ids: torch.Tensor, n_dept: int, experts_per_dept: int, n_expert: int, slots: int):
    T, k = ids.shape
    sizes = (T * slots, T * slots, n_dept, T * k, T * k, n_expert, T * k)
    return [ids.new_empty(T, k, slots, dtype=torch.bool)] + [ids.new_empty(n, dtype=torch.int64) for n in sizes]


# An op of its own: opaque to torch.compile, so the compiled layer stays one graph (no graph
# break) while its index math runs as eager PyTorch, with no host synchronisation.
_INDEX_OP = register_op("deamoe::department_index", _index_tensors, _index_shapes)


def department_index(ids: torch.Tensor, shape, slots: int) -> DepartmentIndex:
    """All of fast_deamoe's index math, as a custom op that torch.compile does not trace.  Traced
    by inductor together with the float work on the H200 (torch 2.11), the compiled layer's
    forward was right but its x-gradient was sometimes thousands of times too large, and 200-step
    bf16 runs stuck at the unigram loss in 5 of 6 seeds (3.96 against 1.43).  No run stuck with
    the index math eager (0 of 6 seeds; 0 of 5 with any one of its three functions eager), under
    aot_eager (0 of 6) or in eager mode; inductor's CPU backend computed it right.  With this op:
    0 of 6 stuck, and a whole step 1.5 ms faster than with the index math behind a graph break
    (docs/training-h200.md, fifth and sixth measurements)."""
    return DepartmentIndex(*_INDEX_OP(ids, shape.n_dept, shape.experts_per_dept, shape.n_expert, slots))


def fast_deamoe(layer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, slots: int) -> torch.Tensor:
    """The routed part of DeaMoE.forward; `slots` must be at least the departments a token uses."""
    s = layer.shape
    T, k = ids.shape
    f, dtype = s.h_ffn, compute_dtype(x)
    onehot, porder, pread, dcounts, eorder, einv, ecounts, src = department_index(ids, s, slots)

    # Stage 1: a_g, a_u once per (token, department), grouped by department.
    xd = _Dispatch.apply(x, porder, pread, slots, dtype)
    a = grouped_mm(xd, _stacked(dtype, layer.dept_gate, layer.dept_up), dcounts)
    a_g, a_u = layer.sigma(a.view(-1, 2, f)).unbind(1)

    # Stage 2: each assignment (expert order) reads its pair's row, gathered once per half
    # (contiguous inputs for the grouped GEMMs).
    a_g, a_u = (_Expand.apply(half, src, einv, porder, onehot) for half in (a_g, a_u))
    y = F.silu(grouped_mm(a_g, layer.expert_gate, ecounts)) * grouped_mm(a_u, layer.expert_up, ecounts)
    z = layer.sigma(grouped_mm(y, layer.expert_down, ecounts))

    # Stage 3: weighted expert results summed per pair (one-hot slot sum), then W_d once per pair.
    # A padding pair's gradient row (row z's, see _department_rows) meets only zero weights.
    z = _Permute.apply(z, einv, eorder).view(T, k, f)
    zsum = _slot_sum(onehot * weights.unsqueeze(2), z).view(T * slots, f)
    zsum = _Permute.apply(zsum, porder, pread)
    o = grouped_mm(zsum, layer.dept_down, dcounts)
    return _Combine.apply(o, porder, pread, slots)
