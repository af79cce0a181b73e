"""The fast training path (deamoe.model.fast_ffn) computes the layers' own function: forward and
the gradient of every parameter family, in float64 exactly (to rounding) and in bf16 within
bf16 rounding; and a short training run on it follows the reference path's loss curve."""

from __future__ import annotations

import copy

import pytest
import torch

from deamoe.model import DeaMoEConfig, DeaMoEForCausalLM
from deamoe.model.fast_ffn import (_department_rows, _Dispatch, _Expand, department_index, department_slots,
                                   fast_deamoe, sort_groups)
from deamoe.model.layers import build_ffn, reference_forward, routed_reference
from deamoe.routing import route
from deamoe.shapes import DeaMoEShape, MoEShape

SHAPES = [
    MoEShape(h=32, h_ffn=16, n_expert=8, k_expert=3),
    MoEShape(h=32, h_ffn=16, n_expert=8, k_expert=2, n_shared=1),
    DeaMoEShape(h=32, h_ffn=16, n_dept=4, n_expert=16, k_dept=2, k_expert=4, expert_init="random"),
    DeaMoEShape(h=32, h_ffn=16, n_dept=4, n_expert=16, k_dept=3, k_expert=5, operator="rmsnorm",
                expert_init="random", n_shared=1),
    DeaMoEShape(h=32, h_ffn=16, n_dept=4, n_expert=8, k_dept=2, k_expert=3, dept_topk="strict"),
]


def _pair(shape, dtype):
    torch.manual_seed(0)
    ref = build_ffn(shape).to(dtype)
    with torch.no_grad():  # break the identity init's symmetry so every gradient is exercised
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    fast = copy.deepcopy(ref)
    fast.impl = "fast"
    return ref, fast


def _run(layer, x, g, **kw):
    x = x.detach().clone().requires_grad_()
    y = layer(x, **kw)
    (y * g).sum().backward()
    return y, x.grad, {n: p.grad for n, p in layer.named_parameters()}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.kind}-{getattr(s, 'operator', '')}-{s.n_shared}")
@pytest.mark.parametrize("given_ids", [False, True])
def test_fast_path_equals_the_layer_in_float64(shape, given_ids):
    ref, fast = _pair(shape, torch.float64)
    x = torch.randn(70, shape.h, dtype=torch.float64)
    g = torch.randn(70, shape.h, dtype=torch.float64)
    kw = {}
    if given_ids:  # ids from another routing: DeaMoE's pairs then span up to k departments
        ids = torch.stack([torch.randperm(shape.n_expert)[: shape.k_expert] for _ in range(70)])
        kw = {"ids": ids, "weights": torch.rand(70, shape.k_expert, dtype=torch.float64)}
    y0, gx0, gp0 = _run(ref, x, g, **kw)
    y1, gx1, gp1 = _run(fast, x, g, **kw)
    assert torch.allclose(y1, y0, rtol=1e-10, atol=1e-12)
    assert torch.allclose(gx1, gx0, rtol=1e-10, atol=1e-12)
    assert gp0.keys() == gp1.keys()
    for name in gp0:
        if given_ids and name == "router.weight":  # weights given: no gradient reaches the router
            assert gp0[name] is None and gp1[name] is None
            continue
        assert gp0[name] is not None and gp0[name].abs().sum() > 0, name
        assert torch.allclose(gp1[name], gp0[name], rtol=1e-9, atol=1e-12), name
    if kw:  # and both equal the per-assignment reference
        assert torch.allclose(y1, reference_forward(fast, x, kw["ids"], kw["weights"]), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("operator", ["silu", "rmsnorm"])
def test_padding_pairs_leave_no_trace_in_float64(operator):
    """Tokens using 1, 2 and 3 of 3 slots: a third of the pairs are padding, which the department
    GEMMs skip; on the CPU grouped_mm fills the skipped rows (and x's gradient there) with NaN,
    so any read of them would show here.  Output and every gradient equal the layer's."""
    shape = DeaMoEShape(h=32, h_ffn=16, n_dept=4, n_expert=16, k_dept=3, k_expert=3,
                        operator=operator, expert_init="random")
    ref, fast = _pair(shape, torch.float64)
    ids = torch.tensor([[4, 5, 7], [1, 9, 2], [0, 6, 13], [15, 12, 14]] * 12)  # 1, 2, 3, 1 depts
    weights = torch.rand(ids.shape, dtype=torch.float64)
    x = torch.randn(ids.shape[0], shape.h, dtype=torch.float64)
    g = torch.randn_like(x)
    y0, gx0, gp0 = _run(ref, x, g, ids=ids, weights=weights)
    y1, gx1, gp1 = _run(fast, x, g, ids=ids, weights=weights)
    assert torch.isfinite(y1).all() and torch.isfinite(gx1).all()
    assert torch.allclose(y1, y0, rtol=1e-10, atol=1e-12)
    assert torch.allclose(gx1, gx0, rtol=1e-10, atol=1e-12)
    for name, grad in gp0.items():
        if name != "router.weight":  # weights given: no gradient reaches the router
            assert torch.isfinite(gp1[name]).all(), name
            assert torch.allclose(gp1[name], grad, rtol=1e-9, atol=1e-12), name
    weights.requires_grad_()  # the routing weights' gradient too (the router's, when routed)
    w0 = torch.autograd.grad((reference_forward(ref, x, ids, weights) * g).sum(), weights)[0]
    w1 = torch.autograd.grad((fast(x, ids=ids, weights=weights) * g).sum(), weights)[0]
    assert torch.isfinite(w1).all() and torch.allclose(w1, w0, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES[::2], ids=lambda s: s.kind)
def test_fast_path_in_bf16_is_within_bf16_rounding_of_float64(shape):
    """bf16 weights and activations: relative error of the output and of each gradient < 3e-2
    against the float64 layer (bf16 has an 8-bit mantissa; 3e-2 leaves room for the sums)."""
    ref, _ = _pair(shape, torch.float64)
    fast = copy.deepcopy(ref).to(torch.bfloat16)
    fast.impl = "fast"
    x = torch.randn(64, shape.h, dtype=torch.float64)
    g = torch.randn(64, shape.h, dtype=torch.float64)
    with torch.no_grad():
        ids, w = route(shape, ref.router(x), bias=ref.expert_bias)
    y0, gx0, gp0 = _run(ref, x, g, ids=ids, weights=w)
    y1, gx1, gp1 = _run(fast, x.bfloat16(), g.bfloat16(), ids=ids, weights=w)

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()
    assert rel(y1, y0) < 3e-2 and rel(gx1, gx0) < 3e-2
    for name in gp0:
        if name != "router.weight":  # weights given: no gradient reaches the router
            assert rel(gp1[name], gp0[name]) < 3e-2, name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="needs a Hopper-class CUDA GPU (the torch._grouped_mm path)")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fast_path_on_the_gpu_with_padding_pairs_is_within_bf16_rounding(compiled):
    """torch._grouped_mm leaves the rows it skips (padding pairs, and their x-gradient rows)
    uninitialised.  Freed blocks full of NaN are left in the caching allocator first, so those
    rows likely hold NaN; the bf16 routed output, the routing weights' and x's gradients and
    every parameter's gradient are then finite and within 3e-2 relative error of the float64
    layer.  Compiled: as the gpu profile compiles it (the index math an eager island).  A second
    forward and backward runs without host synchronisation (CUDA sync debug mode "error")."""
    shape = DeaMoEShape(h=256, h_ffn=128, n_dept=4, n_expert=32, k_dept=4, k_expert=4,
                        expert_init="random")
    ref, _ = _pair(shape, torch.float64)
    ref = ref.cuda()
    fast = copy.deepcopy(ref).to(torch.bfloat16)
    T, k = 512, shape.k_expert
    gen = torch.Generator().manual_seed(1)
    ids = torch.stack([torch.randperm(shape.n_expert, generator=gen)[:k] for _ in range(T)])
    ids[::3] = torch.tensor([8, 9, 10, 11])  # every third token in one department: 3 padding pairs
    # (the others: about 1.2 on average)
    ids = ids.cuda()
    weights = torch.rand(T, k, dtype=torch.float64, device="cuda")
    x = torch.randn(T, shape.h, dtype=torch.float64, device="cuda")
    g = torch.randn_like(x)
    fn = torch.compile(fast_deamoe) if compiled else fast_deamoe

    def run(layer, fwd, dtype):
        xs, ws = (t.detach().to(dtype).requires_grad_() for t in (x, weights))
        y = fwd(layer, xs, ids, ws)
        (y * g.to(dtype)).sum().backward()
        return y.detach(), xs.grad, ws.grad

    y0, gx0, gw0 = run(ref, routed_reference, torch.float64)
    poison = [torch.full((2 ** e,), float("nan"), dtype=torch.bfloat16, device="cuda") for e in range(10, 25)]
    del poison
    slots = min(shape.n_dept, k)  # as the layer does for given ids
    y1, gx1, gw1 = run(fast, lambda *a: fn(*a, slots), torch.bfloat16)

    def rel(a, b):
        assert torch.isfinite(a).all()
        return ((a.double() - b).norm() / b.norm()).item()
    assert rel(y1, y0) < 3e-2 and rel(gx1, gx0) < 3e-2 and rel(gw1, gw0) < 3e-2
    for (name, p0), p1 in zip(ref.named_parameters(), fast.parameters()):
        if name != "router.weight":  # weights given: no gradient reaches the router
            assert rel(p1.grad, p0.grad) < 3e-2, name
    # again, compiled code already built, with any host synchronisation an error
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run(fast, lambda *a: fn(*a, slots), torch.bfloat16)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_department_slots_put_padding_pairs_after_the_used_departments():
    ids = torch.tensor([[0, 1, 5], [6, 7, 6]])  # 2 experts per department: depts {0, 2}, {3}
    pair_group, slot = department_slots(ids, n_dept=4, experts_per_dept=2, slots=3)
    assert pair_group.tolist() == [[0, 2, 4], [3, 4, 4]]  # 4 = n_dept: padding
    assert slot.tolist() == [[0, 0, 1], [0, 0, 0]]


def test_compiled_deamoe_keeps_its_index_math_out_of_the_graph():
    """department_index is an op torch.compile does not trace: inductor, given the index math and
    the float work in one graph, made x-gradients thousands of times too large on the H200.  The
    graphs torch.compile hands its backend hold no sort and no scatter; the result is eager's."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    shape = SHAPES[2]
    _, layer = _pair(shape, torch.float64)
    torch.manual_seed(1)
    x = torch.randn(24, shape.h, dtype=torch.float64)
    ids = torch.stack([torch.randperm(shape.n_expert)[:shape.k_expert] for _ in range(24)])
    weights = torch.rand(24, shape.k_expert, dtype=torch.float64)
    torch._dynamo.reset()
    y = torch.compile(fast_deamoe, backend=backend)(layer, x, ids, weights, shape.n_dept)
    assert torch.allclose(y, fast_deamoe(layer, x, ids, weights, shape.n_dept), rtol=1e-12, atol=1e-12)
    ops = {str(node.target) for gm in graphs for node in gm.graph.nodes if node.op in ("call_function", "call_method")}
    assert graphs and any("index_select" in op for op in ops)  # the gathers are in the graphs
    assert not any(word in op for op in ops for word in ("sort", "scatter", "cumsum")), ops


def test_department_index_compiles_as_one_opaque_op_without_a_graph_break():
    """A graph break there would split every compiled DeaMoE layer (fullgraph raises on one)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    shape = SHAPES[2]
    torch.manual_seed(2)
    ids = torch.stack([torch.randperm(shape.n_expert)[:shape.k_expert] for _ in range(24)])
    torch._dynamo.reset()
    got = torch.compile(department_index, backend=backend, fullgraph=True)(ids, shape, shape.n_dept)
    for a, b in zip(got, department_index(ids, shape, shape.n_dept)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    ops = {str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert len(graphs) == 1 and any("department_index" in op for op in ops)
    assert not any(word in op for op in ops for word in ("sort", "scatter", "cumsum")), ops


def test_padding_pairs_read_one_row_that_the_last_department_computes():
    """The same routing: 6 pairs, 3 real (depts 0, 2, 3) then 3 padding pairs, sorted last.  The
    department GEMMs multiply the real rows and the first padding row (row 3, in the last
    department's group), not the other two; every padding pair reads row 3."""
    pair_group = torch.tensor([[0, 2, 4], [3, 4, 4]])
    order, read, counts = _department_rows(pair_group, 4)
    assert order.tolist() == [0, 1, 3, 2, 4, 5]
    assert counts.tolist() == [1, 0, 1, 2]
    assert read.tolist() == [0, 1, 3, 2, 3, 3]
    _, read, counts = _department_rows(torch.tensor([[0, 2], [3, 1]]), 4)  # no padding
    assert counts.tolist() == [1, 1, 1, 1] and read.tolist() == [0, 2, 3, 1]


def test_department_slots_match_the_definition_on_random_routings():
    torch.manual_seed(0)
    ids = torch.stack([torch.randperm(24)[:5] for _ in range(200)])  # 6 departments of 4
    pair_group, slot = department_slots(ids, n_dept=6, experts_per_dept=4, slots=5)
    for t in range(200):
        used = sorted({e // 4 for e in ids[t].tolist()})
        assert pair_group[t].tolist() == used + [6] * (5 - len(used))
        assert [pair_group[t, s].item() for s in slot[t]] == [e // 4 for e in ids[t].tolist()]


def test_expand_is_a_gather_whose_backward_sums_each_pairs_assignments():
    """_Expand's dense one-hot backward equals autograd's scatter-add backward of the gather."""
    torch.manual_seed(0)
    T, n_dept, per, k, slots = 9, 5, 3, 4, 4  # slots >= k: every token fits
    ids = torch.stack([torch.randperm(n_dept * per)[:k] for _ in range(T)])
    pair_group, slot = department_slots(ids, n_dept, per, slots)
    onehot = slot.unsqueeze(2) == torch.arange(slots)
    porder, pinv, _ = sort_groups(pair_group.reshape(-1), n_dept + 1)
    eorder, einv, _ = sort_groups(ids.reshape(-1), n_dept * per)
    src = pinv[(torch.arange(T).unsqueeze(1) * slots + slot).reshape(-1)[eorder]]
    rows = torch.randn(T * slots, 5, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(T * k, 5, dtype=torch.float64)
    out = _Expand.apply(rows, src, einv, porder, onehot)
    assert torch.equal(out, rows[src])
    (g_fast,) = torch.autograd.grad(out, rows, grad)
    (g_ref,) = torch.autograd.grad(rows[src], rows, grad)
    assert torch.allclose(g_fast, g_ref, rtol=0, atol=1e-15)


def test_dispatch_casts_before_copying_and_sums_gradients_in_the_input_dtype():
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    order, inv, _ = sort_groups(torch.tensor([2, 0, 1, 1, 0, 2] * 2), 3)
    out = _Dispatch.apply(x, order, inv, 2, torch.float32)
    assert out.dtype == torch.float32 and torch.equal(out, x.float()[order // 2])
    grad = torch.randn(12, 4, dtype=torch.float32)
    (gx,) = torch.autograd.grad(out, x, grad)
    assert gx.dtype == torch.float64
    assert torch.allclose(gx, torch.zeros(6, 4, dtype=torch.float64).index_add_(0, order // 2, grad.double()))


@pytest.mark.parametrize("ffn_type", ["moe", "deamoe"])
def test_training_on_the_fast_path_follows_the_reference_loss_curve(ffn_type):
    """30 AdamW steps in float32 from the same initialisation and batches: the two paths differ
    only in summation order, so the curves stay within 1e-3 of each other."""
    curves = {}
    for impl in ("torch", "fast"):
        torch.manual_seed(0)
        cfg = DeaMoEConfig(ffn_type=ffn_type, ffn_impl=impl, vocab_size=128, hidden_size=32,
                           num_hidden_layers=2, num_attention_heads=2, h_ffn=16, n_expert=8,
                           k_expert=3, n_dept=4, k_dept=2)
        model = DeaMoEForCausalLM(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        gen = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(30):
            tokens = torch.randint(0, 16, (4, 33), generator=gen)  # a small alphabet: learnable
            loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
            (loss + 0.01 * model.aux_loss()).backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        curves[impl] = torch.tensor(losses)
    assert curves["torch"][-5:].mean() < curves["torch"][:5].mean() - 0.3  # it learns
    assert (curves["fast"] - curves["torch"]).abs().max() < 1e-3


def _bf16_curve(ffn_type: str, impl: str, compiled: bool, steps: int, nudge: float = 0.0,
                nudge_seed: int = 2) -> torch.Tensor:
    """Losses of `steps` AdamW steps on the GPU, float32 weights under bf16 autocast, the same
    initialisation and batches for every call; `nudge`: a relative perturbation of every initial
    weight (bf16 rounding is 2**-9)."""
    torch.manual_seed(0)
    cfg = DeaMoEConfig(ffn_type=ffn_type, ffn_impl=impl, vocab_size=512, hidden_size=256,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, h_ffn=128,
                       n_expert=32, k_expert=8, n_dept=8, k_dept=5)
    model = DeaMoEForCausalLM(cfg).cuda()
    if nudge:
        gen = torch.Generator(device="cuda").manual_seed(nudge_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + nudge * torch.randn(p.shape, generator=gen, device="cuda"))
    if compiled:
        model.compile_layers()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    gen = torch.Generator().manual_seed(1)
    successors = torch.randint(0, 64, (64, 4), generator=gen)  # a Markov chain: 4 next tokens each
    losses = []
    for _ in range(steps):
        tokens = torch.empty(16, 129, dtype=torch.int64)
        tokens[:, 0] = torch.randint(0, 64, (16,), generator=gen)
        for i in range(128):
            tokens[:, i + 1] = successors[tokens[:, i], torch.randint(0, 4, (16,), generator=gen)]
        tokens = tokens.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
            total = loss + 0.01 * model.aux_loss()
        total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return torch.stack(losses).float().cpu()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="needs a Hopper-class CUDA GPU (the torch._grouped_mm path)")
@pytest.mark.parametrize("ffn_type", ["moe", "deamoe"])
def test_200_bf16_steps_on_the_compiled_fast_path_follow_the_torch_path_within_bf16_noise(ffn_type):
    """The gpu profile's path (fast FFN, compiled layers) against the layers' own eager path, 200
    steps in bf16 from one initialisation and batch stream (a Markov chain of 64 tokens, 4
    successors each: loss falls from ln 512 toward ln 4 over the run).  bf16 noise is measured,
    not assumed: the torch path again from weights nudged by bf16 rounding (2**-9, relative).
    Step by step the two paths differ, on average, by at most 3x what that nudge does (plus
    1e-3; the fast path reorders sums at every step, the nudge perturbs once), both learn, and
    their last 10 steps' mean losses agree within 0.05.  The run passes a plateau at the unigram
    loss (about 3.97) near step 10; the fast path from four more nudged initialisations must
    leave it too, ending within 0.1 of the torch path: a DeaMoE layer compiled with its index
    math inside inductor's graph stayed there in 5 of 6 such runs (its x-gradients were
    sometimes thousands of times too large), and one run alone missed that."""
    steps = 200
    ref = _bf16_curve(ffn_type, "torch", False, steps)
    noise = (_bf16_curve(ffn_type, "torch", False, steps, nudge=2 ** -9) - ref).abs().mean().item()
    fast = _bf16_curve(ffn_type, "fast", True, steps)
    gap = (fast - ref).abs().mean().item()
    print(f"{ffn_type}: mean |fast - torch| {gap:.4f}, bf16 nudge {noise:.4f}; loss "
          f"{ref[:10].mean():.3f} -> {ref[-10:].mean():.3f} (torch) / {fast[-10:].mean():.3f} (fast)")
    assert ref[-10:].mean() < ref[:10].mean() - 1 and fast[-10:].mean() < fast[:10].mean() - 1
    assert gap <= 3 * noise + 1e-3, (gap, noise)
    assert abs(fast[-10:].mean() - ref[-10:].mean()) < 0.05
    finals = [_bf16_curve(ffn_type, "fast", True, steps, nudge=2 ** -9, nudge_seed=seed)[-10:].mean().item()
              for seed in (3, 4, 5, 6)]
    print(f"{ffn_type}: fast path from nudged initialisations ends at {[round(f, 3) for f in finals]}")
    assert all(f < ref[-10:].mean() + 0.1 for f in finals), finals
