"""Does inductor (CPU backend) compute DeaMoE's fast path wrong for some routings?  fp32, eager vs
torch.compile(fullgraph) over routings of varying department concentration; grouped_mm replaced
by a sync-free dense version (per-row weight gather) so the whole layer is one graph."""
import sys, time
import torch
import deamoe.model.fast_ffn as ff
from deamoe.model.layers import build_ffn
from deamoe.shapes import DeaMoEShape

torch.manual_seed(0)


def dense_grouped(x, w, counts):
    ends = counts.cumsum(0)
    g = torch.searchsorted(ends, torch.arange(x.shape[0], device=x.device), right=True)
    valid = (g < w.shape[0]).unsqueeze(1)
    wr = w.index_select(0, g.clamp(max=w.shape[0] - 1))  # [A, out, in]
    return torch.where(valid, torch.bmm(wr, x.unsqueeze(2)).squeeze(2), float("nan"))


ff.grouped_mm = dense_grouped
shape = DeaMoEShape(h=64, h_ffn=32, n_dept=8, n_expert=32, k_dept=5, k_expert=8, expert_init="random")
layer = build_ffn(shape)
with torch.no_grad():
    for p in layer.parameters():
        p.add_(0.05 * torch.randn_like(p))
T, k, S = 512, 8, 5
compiled = torch.compile(ff.fast_deamoe, fullgraph=True)


def routing(n_depts_max):
    ids = []
    for _ in range(T):
        nd = int(torch.randint(2, n_depts_max + 1, ()))
        depts = torch.randperm(8)[:nd]
        experts = (depts.unsqueeze(1) * 4 + torch.arange(4)).reshape(-1)
        ids.append(experts[torch.randperm(experts.numel())[:k]])
    return torch.stack(ids)


def run(fn, x, ids, w, g):
    for p in layer.parameters():
        p.grad = None
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = fn(layer, x, ids, w, S)
    (y * g).sum().backward()
    return [y.detach(), x.grad, w.grad] + [p.grad.clone() for n, p in layer.named_parameters() if n != "router.weight"]


names = ["y", "dx", "dw"] + [n for n, _ in layer.named_parameters() if n != "router.weight"]
t0 = time.time()
for trial in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
    ids = routing(2 + trial % 4)
    x, g = torch.randn(T, 64), torch.randn(T, 64)
    w = torch.rand(T, k)
    a, b = run(ff.fast_deamoe, x, ids, w, g), run(compiled, x, ids, w, g)
    errs = {n: ((p - q).norm() / q.norm()).item() for n, p, q in zip(names, b, a)}
    worst = max(errs, key=errs.get)
    print(f"trial {trial} (<= {2 + trial % 4} depts): worst {worst} {errs[worst]:.2e} ({time.time() - t0:.0f}s)", flush=True)
