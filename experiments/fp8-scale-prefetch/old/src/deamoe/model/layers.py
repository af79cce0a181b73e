"""The two FFN layers: a standard MoE and DeaMoE (Section 3 of the paper), plus their reference.

Weight layout (shared with the kernels, the vLLM model and the budget formula):
  MoE     gate_proj, up_proj [n_expert, h_ffn, h]; down_proj [n_expert, h, h_ffn]
  DeaMoE  dept_gate, dept_up [n_dept, h_ffn, h]; dept_down [n_dept, h, h_ffn]      (W_g, W_u, W_d)
          expert_gate, expert_up, expert_down [n_expert, h_ffn, h_ffn]           (A_g, A_u, A_d^T)
Every matrix multiplies a column vector: y = W @ x.  Both layers route with deamoe.routing.route
and keep an `expert_bias` buffer (DeepSeek-V3 auxiliary-loss-free balancing; zeros otherwise).

DeaMoE expert e of department j = e // (n_expert // n_dept), for a token x with weight w_e:
  a_g = sigma(W_g x),  a_u = sigma(W_u x)                 once per (token, department)
  y_e = SiLU(A_g a_g) * (A_u a_u),  z_e = sigma(A_d^T y_e)  once per (token, expert)
  out = sum_j W_d (sum_{e in j} w_e z_e)                    once per (token, department)
Summing the weighted z_e before W_d is exact because W_d is linear (Section 3.2).

With shape.n_shared > 0 both layers add `shared_experts` (DeepSeekMoE's shared-expert isolation):
one SwiGLU FFN of width shape.shared_ffn applied to every token and added to the routed output,
unweighted and unscaled.  n_shared experts of width w sum to one SwiGLU of width n_shared * w (the
rows of gate/up and columns of down concatenated), so they are stored fused, as DeepSeek's and
vLLM's checkpoints store them:
  shared_experts.gate_proj, .up_proj [shared_ffn, h]; .down_proj [h, shared_ffn]   (nn.Linear)
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.model.fast_ffn import fast_deamoe, fast_moe
from deamoe.model.grouped import grouped_mm
from deamoe.routing import route

# How a layer computes its routed part: "torch" (grouped by nonzero/bincount, combined with
# index_add_; the reference for the fast path) or "fast" (deamoe.model.fast_ffn: sort-based,
# static shapes, no host sync, for training under torch.compile).
IMPLS = ("torch", "fast")


def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm without a gain: the FFN operator (a learnable gain would add parameters outside the
    matched budget) and, with its gain, the decoder's RMSNorm module."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


_OPERATORS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "rmsnorm": rms_norm,
    "none": lambda x: x,
}


def operator(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The sigma of Section 3.1 applied at the department/expert interfaces."""
    return _OPERATORS[name]


class SharedExperts(nn.Module):
    """The always-active shared experts, fused into one SwiGLU FFN of width shape.shared_ffn."""

    def __init__(self, h: int, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(h, width, bias=False)
        self.up_proj = nn.Linear(h, width, bias=False)
        self.down_proj = nn.Linear(width, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def shared_experts(shape: MoEShape | DeaMoEShape) -> SharedExperts | None:
    return SharedExperts(shape.h, shape.shared_ffn) if shape.n_shared else None


class MoE(nn.Module):
    """Standard MoE FFN with SwiGLU experts (equations 1-3)."""

    def __init__(self, shape: MoEShape, init_std: float = 0.02, expert_init_scale: float = 1.0,
                 impl: str = "torch"):
        super().__init__()
        self.shape = shape
        n, f, h = shape.n_expert, shape.h_ffn, shape.h
        self.init_std = init_std
        self.expert_init_scale = expert_init_scale
        self.impl = impl
        self.router = nn.Linear(h, n, bias=False)
        self.gate_proj = nn.Parameter(torch.empty(n, f, h))
        self.up_proj = nn.Parameter(torch.empty(n, f, h))
        self.down_proj = nn.Parameter(torch.empty(n, h, f))
        self.shared_experts = shared_experts(shape)
        self.register_buffer("expert_bias", torch.zeros(n))
        self.last_logits: torch.Tensor | None = None
        self.last_ids: torch.Tensor | None = None
        self.reset_parameters()

    def shared_parameters(self) -> tuple[nn.Parameter, ...]:
        s = self.shared_experts
        return () if s is None else (s.gate_proj.weight, s.up_proj.weight, s.down_proj.weight)

    def reset_parameters(self) -> None:
        nn.init.normal_(self.router.weight, std=self.init_std)
        self.init_own()
        for w in self.shared_parameters():
            nn.init.normal_(w, std=self.init_std)

    def init_own(self, normal_=nn.init.normal_, copy_=None, zeros_=nn.init.zeros_) -> None:
        """Initialise the layer's own tensors (its router and shared experts are nn.Linear
        modules).  The init functions are arguments so the Hugging Face model passes its own
        (transformers.initialization, which skips weights loaded from a checkpoint)."""
        for w in (self.gate_proj, self.up_proj, self.down_proj):
            normal_(w, mean=0.0, std=self.init_std * self.expert_init_scale)
        zeros_(self.expert_bias)

    def _add_shared(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out if self.shared_experts is None else out + self.shared_experts(x).to(out.dtype)

    def _route(self, x, ids, weights):
        if ids is None:
            logits = self.router(x)
            ids, weights = route(self.shape, logits, bias=self.expert_bias)
            self.last_logits, self.last_ids = logits, ids.detach()
        return ids, weights

    def forward(self, x: torch.Tensor, ids=None, weights=None) -> torch.Tensor:
        lead, h = x.shape[:-1], x.shape[-1]
        x = x.reshape(-1, h)
        ids, weights = self._route(x, ids, weights)
        if self.impl == "fast":
            return self._add_shared(x, fast_moe(self, x, ids, weights)).reshape(*lead, h)
        k = ids.shape[1]
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)  # (token, slot) assignments grouped by expert
        token = order // k
        counts = torch.bincount(flat, minlength=self.shape.n_expert)
        xs = x[token]
        act = F.silu(grouped_mm(xs, self.gate_proj, counts)) * grouped_mm(xs, self.up_proj, counts)
        y = grouped_mm(act, self.down_proj, counts)
        y = y * weights.reshape(-1)[order, None].to(y.dtype)
        out = y.new_zeros(x.shape[0], h).index_add_(0, token, y)
        return self._add_shared(x, out).reshape(*lead, h)


class DeaMoE(nn.Module):
    """DeaMoE FFN: departments share W_g/W_u/W_d; experts own A_g/A_u/A_d (Section 3)."""

    def __init__(self, shape: DeaMoEShape, init_std: float = 0.02, expert_init_scale: float = 1.0,
                 impl: str = "torch"):
        super().__init__()
        self.shape = shape
        d, e, f, h = shape.n_dept, shape.n_expert, shape.h_ffn, shape.h
        self.init_std = init_std
        self.expert_init_scale = expert_init_scale
        self.impl = impl
        self.sigma = operator(shape.operator)
        self.router = nn.Linear(h, e, bias=False)
        self.dept_gate = nn.Parameter(torch.empty(d, f, h))
        self.dept_up = nn.Parameter(torch.empty(d, f, h))
        self.dept_down = nn.Parameter(torch.empty(d, h, f))
        self.expert_gate = nn.Parameter(torch.empty(e, f, f))
        self.expert_up = nn.Parameter(torch.empty(e, f, f))
        self.expert_down = nn.Parameter(torch.empty(e, f, f))
        self.shared_experts = shared_experts(shape)
        self.register_buffer("expert_bias", torch.zeros(e))
        self.last_logits: torch.Tensor | None = None
        self.last_ids: torch.Tensor | None = None
        self.reset_parameters()

    def expert_parameters(self) -> tuple[nn.Parameter, ...]:
        return (self.expert_gate, self.expert_up, self.expert_down)

    shared_parameters = MoE.shared_parameters
    _add_shared = MoE._add_shared

    reset_parameters = MoE.reset_parameters

    def init_own(self, normal_=nn.init.normal_, copy_=None, zeros_=nn.init.zeros_) -> None:
        """As MoE.init_own; experts start as identities (expert_init='identity') or normals.
        The department matrices are the h-sided factor of every routed expert (the baseline's
        expert matrices' counterpart): expert_init_scale scales them, not the f x f factor."""
        for w in (self.dept_gate, self.dept_up, self.dept_down):
            normal_(w, mean=0.0, std=self.init_std * self.expert_init_scale)
        for w in self.expert_parameters():
            if self.shape.expert_init == "identity":
                # torch.nn.init.eye_ per expert: each expert starts equal to its department backbone.
                eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device).expand_as(w)
                if copy_ is None:
                    with torch.no_grad():
                        w.copy_(eye)
                else:
                    copy_(w, eye)
            else:
                normal_(w, mean=0.0, std=self.init_std)
        zeros_(self.expert_bias)

    _route = MoE._route

    def forward(self, x: torch.Tensor, ids=None, weights=None) -> torch.Tensor:
        lead, h = x.shape[:-1], x.shape[-1]
        x = x.reshape(-1, h)
        routed = ids is None
        ids, weights = self._route(x, ids, weights)
        T, k = ids.shape
        s = self.shape
        if self.impl == "fast":
            # The router keeps k_dept departments per token; given ids may span up to k of them.
            slots = min(s.n_dept, s.k_dept if routed else k)
            return self._add_shared(x, fast_deamoe(self, x, ids, weights, slots)).reshape(*lead, h)
        per = s.experts_per_dept
        dept = torch.div(ids, per, rounding_mode="floor")

        # Stage 1: one row per distinct (token, department), grouped by department.
        used = torch.zeros(T, s.n_dept, dtype=torch.bool, device=x.device).scatter_(1, dept, True)
        pair_token, pair_dept = used.nonzero(as_tuple=True)
        by_dept = pair_dept.argsort(stable=True)
        pair_token, pair_dept = pair_token[by_dept], pair_dept[by_dept]
        pair_of = torch.full((T, s.n_dept), -1, dtype=torch.long, device=x.device)
        pair_of[pair_token, pair_dept] = torch.arange(pair_token.numel(), device=x.device)
        dept_counts = torch.bincount(pair_dept, minlength=s.n_dept)
        xd = x[pair_token]
        a_gate = self.sigma(grouped_mm(xd, self.dept_gate, dept_counts))
        a_up = self.sigma(grouped_mm(xd, self.dept_up, dept_counts))

        # Stage 2: one row per (token, expert), grouped by expert, reading its department row.
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)
        token = order // k
        pair = pair_of[token, dept.reshape(-1)[order]]
        counts = torch.bincount(flat, minlength=s.n_expert)
        y = F.silu(grouped_mm(a_gate[pair], self.expert_gate, counts)) * grouped_mm(
            a_up[pair], self.expert_up, counts
        )
        z = self.sigma(grouped_mm(y, self.expert_down, counts))
        z = z * weights.reshape(-1)[order, None].to(z.dtype)

        # Stage 3: weighted expert results summed per (token, department), then W_d once.
        zsum = z.new_zeros(pair_token.numel(), s.h_ffn).index_add_(0, pair, z)
        o = grouped_mm(zsum, self.dept_down, dept_counts)
        out = o.new_zeros(T, h).index_add_(0, pair_token, o)
        return self._add_shared(x, out).reshape(*lead, h)


def reference_forward(
    layer: MoE | DeaMoE, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Plain per-(token, expert) evaluation of equation 4 (MoE: equation 1), summed with eq. 3,
    plus each shared expert as its own dense SwiGLU FFN.

    Gathers each assignment's full weights; only for tests and kernel checks at small shapes.
    """
    out = routed_reference(layer, x, ids, weights)
    return out + shared_reference(layer, x) if layer.shape.n_shared else out


def shared_reference(layer: MoE | DeaMoE, x: torch.Tensor) -> torch.Tensor:
    """Sum over the n_shared shared experts, each a dense SwiGLU of width shared_mult * h_ffn
    cut from the fused weights; zeros without shared experts."""
    out = torch.zeros_like(x)
    s = layer.shape
    if not s.n_shared:
        return out
    sh, width = layer.shared_experts, s.shared_ffn // s.n_shared
    for i in range(s.n_shared):
        rows = slice(i * width, (i + 1) * width)
        g = x @ sh.gate_proj.weight[rows].T
        u = x @ sh.up_proj.weight[rows].T
        out = out + (F.silu(g) * u) @ sh.down_proj.weight[:, rows].T
    return out


def routed_reference(
    layer: MoE | DeaMoE, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """The routed part of reference_forward."""
    w = weights.to(x.dtype)[..., None]
    if isinstance(layer, MoE):
        g = torch.einsum("tkfh,th->tkf", layer.gate_proj[ids], x)
        u = torch.einsum("tkfh,th->tkf", layer.up_proj[ids], x)
        y = torch.einsum("tkhf,tkf->tkh", layer.down_proj[ids], F.silu(g) * u)
        return (w * y).sum(1)
    sigma, dept = layer.sigma, torch.div(ids, layer.shape.experts_per_dept, rounding_mode="floor")
    a_g = sigma(torch.einsum("tkfh,th->tkf", layer.dept_gate[dept], x))
    a_u = sigma(torch.einsum("tkfh,th->tkf", layer.dept_up[dept], x))
    g = F.silu(torch.einsum("tkfg,tkg->tkf", layer.expert_gate[ids], a_g))
    u = torch.einsum("tkfg,tkg->tkf", layer.expert_up[ids], a_u)
    z = sigma(torch.einsum("tkfg,tkg->tkf", layer.expert_down[ids], g * u))
    y = torch.einsum("tkhf,tkf->tkh", layer.dept_down[dept], z)
    return (w * y).sum(1)


def build_ffn(shape: MoEShape | DeaMoEShape, init_std: float = 0.02,
              expert_init_scale: float = 1.0, impl: str = "torch") -> MoE | DeaMoE:
    cls = DeaMoE if isinstance(shape, DeaMoEShape) else MoE
    return cls(shape, init_std, expert_init_scale, impl)
