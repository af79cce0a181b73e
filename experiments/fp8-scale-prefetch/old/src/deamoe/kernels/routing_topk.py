"""Single-launch Triton implementation of `deamoe.routing.route` for decoding.

One program per token does everything `route_topk` / `route_group_limited` do in torch:
softmax over all experts (fp32), optional selection-only bias, department score = sum of the
two best expert scores of the department, keep the k_dept best departments, take the k_expert
best experts inside them (soft) or the closed-form strict set, rank best first, gather the
probabilities and renormalise them to sum 1 times `scaling`.  The reference stays
`deamoe.routing` (tests/kernels/test_routing_kernel.py checks this kernel equal to it); this
exists because the torch version costs 4-8 launches (~13 / ~40 us with torch.compile on the
H200), most of the fixed cost of a decode MoE layer; this kernel takes 2.3-2.8 us (baselines) and
4.7-6.5 us (DeaMoE) alone.

Each argmax is ONE max-reduction over an int64 key: the high 32 bits are the fp32 score mapped
to an order-preserving int32, the low 32 bits are (2^31-1 - index), so the max gives the best
score and, among equal scores, the lowest index.  The scores are laid out [department, expert in
department] (experts are numbered department-major); the baseline is one "department".
Warps per token: `num_warps` (the kernel is latency-bound: instructions per thread).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deamoe.shapes import DeaMoEShape, MoEShape

NEG_KEY = tl.constexpr(-9223372036854775807)  # below every real key (also -inf's)


def num_warps(block: int) -> int:
    """Warps per token for a [department, expert] score block of `block` elements.  A DeaMoE
    routing is ~30 dependent reductions and one program per token, so its time is the
    per-thread instruction count (latency, not throughput): 8720 SASS instructions per thread
    with 1 warp on DeepSeek-V3's 8 x 128 block, 5504 with 2, 4016 with 4, 2592 with 8 (each
    cross-warp reduction then pays a barrier).  1 warp up to 256 scores (the baselines), 4 up
    to 512 (Qwen3's 8 x 64: 4.7-4.8 us against 4.8-4.9 with 8), else 8 (the 8 x 128 blocks:
    6.1-6.4 us against 6.2-6.5 with 4; inside the layer, beside the dense department GEMM, 4
    warps were level with 8 as well)."""
    return 1 if block <= 256 else 4 if block <= 512 else 8


@triton.jit
def _key(v, idx):
    """int64 key ordered like (v, -idx): fp32 bits made monotone as a signed int32."""
    bits = v.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (ordered.to(tl.int64) << 32) + (2147483647 - idx.to(tl.int64))


@triton.jit
def _key_index(key):
    low = key - ((key >> 32) << 32)
    return (2147483647 - low).to(tl.int32)


@triton.jit
def _key_value(key):
    ordered = (key >> 32).to(tl.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _route_kernel(logits_ptr, bias_ptr, ids_ptr, w_ptr, stride_t, n_dept, per, scaling,
                  K: tl.constexpr, K_DEPT: tl.constexpr, GROUPED: tl.constexpr,
                  STRICT: tl.constexpr, TOP2: tl.constexpr, HAS_BIAS: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    j = tl.arange(0, BLOCK_P)
    valid = (d[:, None] < n_dept) & (j[None, :] < per)
    e = d[:, None] * per + j[None, :]  # expert index, department-major
    row = logits_ptr + t * stride_t
    x = tl.load(row + e, mask=valid, other=float("-inf")).to(tl.float32)
    xf = tl.reshape(x, [BLOCK_D * BLOCK_P], can_reorder=True)  # order-free max / sum
    mx = tl.max(xf, axis=0)
    tot = tl.sum(tl.exp(xf - mx), axis=0)
    sel = tl.exp(x - mx) / tot  # softmax probabilities
    if HAS_BIAS:  # selection only; the weights below use the probabilities
        sel = sel + tl.load(bias_ptr + e, mask=valid, other=0.0).to(tl.float32)
    key = tl.where(valid, _key(sel, e), NEG_KEY)
    avail = valid
    if GROUPED:
        k1 = tl.max(key, axis=1)  # best expert of each department
        i1 = _key_index(k1)
        score = _key_value(k1)
        if TOP2:
            score = score + _key_value(tl.max(tl.where(e != i1[:, None], key, NEG_KEY), axis=1))
        dkey = tl.where(d < n_dept, _key(score, d), NEG_KEY)
        kept = d < 0
        for _ in tl.static_range(K_DEPT):
            di = _key_index(tl.max(dkey, axis=0))
            kept = kept | (d == di)
            dkey = tl.where(d == di, NEG_KEY, dkey)
        avail = valid & kept[:, None]
        if STRICT:  # closed form: each kept department's best + best K - K_DEPT of the rest
            chosen = avail & (e == i1[:, None])
            rest = tl.where(avail & (e != i1[:, None]), key, NEG_KEY)
            for _ in tl.static_range(K - K_DEPT):
                ei = _key_index(tl.max(tl.max(rest, axis=1), axis=0))
                chosen = chosen | (e == ei)
                rest = tl.where(e == ei, NEG_KEY, rest)
            avail = chosen
    # the top-k loop runs on a flat view: one reduction per pick instead of two (axis 1, then
    # axis 0, with a layout change between).  Keys are distinct and carry their expert index, so
    # the element order is irrelevant (can_reorder) and a pick removes itself by value.
    flat = tl.reshape(tl.where(avail, key, NEG_KEY), [BLOCK_D * BLOCK_P], can_reorder=True)
    kk = tl.arange(0, BLOCK_K)
    ids = tl.zeros([BLOCK_K], dtype=tl.int32)
    for i in tl.static_range(K):  # best first
        best = tl.max(flat, axis=0)
        ids = tl.where(kk == i, _key_index(best), ids)
        flat = tl.where(flat == best, NEG_KEY, flat)
    kmask = kk < K
    xs = tl.load(row + ids, mask=kmask, other=float("-inf")).to(tl.float32)
    w = tl.where(kmask, tl.exp(xs - mx) / tot, 0.0)
    w = w / tl.maximum(tl.sum(w, axis=0), 1e-20) * scaling
    tl.store(ids_ptr + t * K + kk, ids.to(tl.int64), mask=kmask)
    tl.store(w_ptr + t * K + kk, w, mask=kmask)


def _launch(logits, n_dept, per, k, k_dept, grouped, strict, scaling, bias):
    if logits.dim() != 2 or logits.shape[1] != n_dept * per:
        raise ValueError(f"routing kernel: logits {tuple(logits.shape)} vs {n_dept} x {per} experts")
    T, n = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if bias is not None and (bias.shape != (n,) or bias.device != logits.device):
        raise ValueError(f"routing kernel: bias {tuple(bias.shape)} on {bias.device}, want ({n},) on {logits.device}")
    ids = torch.empty(T, k, dtype=torch.int64, device=logits.device)
    weights = torch.empty(T, k, dtype=torch.float32, device=logits.device)
    if T == 0:
        return ids, weights
    bias_arg = bias.contiguous() if bias is not None else logits  # unread without bias
    block = triton.next_power_of_2(n_dept) * triton.next_power_of_2(per)
    warps = num_warps(block)
    _route_kernel[(T,)](
        logits, bias_arg, ids, weights, logits.stride(0), n_dept, per, float(scaling),
        K=k, K_DEPT=k_dept, GROUPED=grouped, STRICT=strict, TOP2=per >= 2,
        HAS_BIAS=bias is not None, BLOCK_D=triton.next_power_of_2(n_dept),
        BLOCK_P=triton.next_power_of_2(per), BLOCK_K=triton.next_power_of_2(k), num_warps=warps,
    )
    return ids, weights


def topk_softmax(logits, k: int, scaling: float = 1.0, bias=None):
    """= deamoe.routing.route_topk, one launch."""
    n = logits.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"routing kernel: k={k} outside 1..{n} experts")
    return _launch(logits, 1, n, k, 0, False, False, scaling, bias)


def group_limited_topk(logits, n_dept: int, k_dept: int, k_expert: int, strict: bool = False,
                       scaling: float = 1.0, bias=None):
    """= deamoe.routing.route_group_limited, one launch."""
    n = logits.shape[-1]
    if n % n_dept:
        raise ValueError(f"routing kernel: n_expert={n} not divisible by n_dept={n_dept}")
    per = n // n_dept
    if not 1 <= k_dept <= n_dept or not 1 <= k_expert <= k_dept * per:
        raise ValueError(f"routing kernel: k_dept={k_dept}, k_expert={k_expert} do not fit "
                         f"{n_dept} departments of {per} experts")
    if strict and k_expert < k_dept:
        raise ValueError(f"routing kernel: strict needs k_expert={k_expert} >= k_dept={k_dept}")
    return _launch(logits, n_dept, per, k_expert, k_dept, True, strict, scaling, bias)


def route_kernel(shape: MoEShape | DeaMoEShape, logits: torch.Tensor, bias=None):
    """Same contract as deamoe.routing.route (ids [T, k] int64 best first, weights [T, k] fp32)."""
    if isinstance(shape, DeaMoEShape):
        return group_limited_topk(logits, shape.n_dept, shape.k_dept, shape.k_expert,
                                  strict=shape.dept_topk == "strict",
                                  scaling=shape.routed_scaling, bias=bias)
    return topk_softmax(logits, shape.k_expert, scaling=shape.routed_scaling, bias=bias)


def compare_with_reference(shape: MoEShape | DeaMoEShape, logits: torch.Tensor, bias=None) -> dict:
    """Kernel vs deamoe.routing.route on the same logits: {same_sets, ranked, max_w_err, ...}.

    Sets are compared per token; where they differ (an exact tie in the scores, possible with
    bf16 logits) the selected selection scores must still be equal (`tie_only`).
    """
    from deamoe.routing import route

    ids, w = route_kernel(shape, logits, bias)
    ref_ids, ref_w = route(shape, logits, bias=bias)
    probs = torch.softmax(logits.float(), dim=-1)
    select = probs if bias is None else probs + bias.float()
    same = (ids.sort(1).values == ref_ids.sort(1).values).all(1)
    ours, theirs = select.gather(1, ids), select.gather(1, ref_ids)
    tie_only = bool((ours.sort(1).values == theirs.sort(1).values).all())
    ranked = bool((ours[:, :-1] >= ours[:, 1:]).all()) if ids.shape[1] > 1 else True
    # weights compared slot by slot after putting both in the same expert order
    w_err = float("nan")
    if bool(same.all()):
        a, b = ids.sort(1), ref_ids.sort(1)
        w_err = float((w.gather(1, a.indices) - ref_w.gather(1, b.indices)).abs().max()) if w.numel() else 0.0
    return {"tokens": logits.shape[0], "same_sets": bool(same.all()), "differing_tokens": int((~same).sum()),
            "tie_only": tie_only, "ranked": ranked, "max_w_err": w_err,
            "distinct_ids": bool(all(len(set(r)) == len(r) for r in ids.tolist()))}


def route_layer(layer, x: torch.Tensor):
    """What `layer._route(x, None, None)` does (router, route with the layer's selection bias,
    keep last_logits/last_ids), with this kernel doing the routing."""
    logits = layer.router(x)
    ids, weights = route_kernel(layer.shape, logits, bias=layer.expert_bias)
    layer.last_logits, layer.last_ids = logits, ids.detach()
    return ids, weights
