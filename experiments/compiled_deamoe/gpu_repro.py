"""A small GPU repro, without training: DeaMoE's fast path with its index math traced by inductor
(the pre-fix configuration: department_index.__wrapped__) against eager, over random routings
of 2-5 departments per token.  (1) department_index alone, compiled, vs eager: every index
tensor equal?  (2) the layer's forward and every gradient, bf16 with torch._grouped_mm, traced
index math vs the eager island (the product) vs eager; worst relative error per trial."""
import time
import torch
import deamoe.model.fast_ffn as ff
from deamoe.model.layers import build_ffn
from deamoe.shapes import DeaMoEShape

torch.manual_seed(0)
dev = "cuda"
shape = DeaMoEShape(h=256, h_ffn=128, n_dept=8, n_expert=32, k_dept=5, k_expert=8, expert_init="random")
T, k, S = 2048, 8, 5
island, traced = ff.department_index, ff.department_index.__wrapped__


def routing(n_max):
    rows = []
    for _ in range(T):
        nd = int(torch.randint(2, n_max + 1, ()))
        depts = torch.randperm(8)[:nd]
        experts = (depts.unsqueeze(1) * 4 + torch.arange(4)).reshape(-1)
        rows.append(experts[torch.randperm(experts.numel())[:k]])
    return torch.stack(rows).to(dev)


index_compiled = torch.compile(traced)
for trial in range(8):
    ids = routing(2 + trial % 4)
    a, b = traced(ids, shape, S), index_compiled(ids, shape, S)
    bad = [name for name, p, q in zip(a._fields, a, b) if not torch.equal(p, q)]
    print(f"index alone, trial {trial}: differing {bad or 'none'}", flush=True)

layer = build_ffn(shape).to(dev)
with torch.no_grad():
    for p in layer.parameters():
        p.add_(0.05 * torch.randn_like(p))
names = ["y", "dx", "dw"] + [n for n, _ in layer.named_parameters() if n != "router.weight"]


def run(fn, x, ids, w, g):
    for p in layer.parameters():
        p.grad = None
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = fn(layer, x, ids, w, S)
    (y.float() * g).sum().backward()
    return [y.detach().double(), x.grad.double(), w.grad.double()] + [
        p.grad.double() for n, p in layer.named_parameters() if n != "router.weight"]


def with_index(index):
    def fn(*a):
        ff.department_index = index
        return ff.fast_deamoe(*a)
    return fn


ff.department_index = traced
compiled_traced = torch.compile(ff.fast_deamoe)
t0 = time.time()
for trial in range(12):
    ids = routing(2 + trial % 4)
    x, g, w = torch.randn(T, 256, device=dev), torch.randn(T, 256, device=dev), torch.rand(T, k, device=dev)
    ff.department_index = island
    ref = run(ff.fast_deamoe, x, ids, w, g)
    ff.department_index = traced
    got = run(compiled_traced, x, ids, w, g)
    errs = {n: ((p - q).norm() / q.norm()).item() for n, p, q in zip(names, got, ref)}
    worst = max(errs, key=errs.get)
    print(f"layer, traced index compiled vs eager, trial {trial} (<= {2 + trial % 4} depts): worst {worst} "
          f"{errs[worst]:.2e}, dx {errs['dx']:.2e} ({time.time() - t0:.0f}s)", flush=True)
ff.department_index = island
