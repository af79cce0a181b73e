"""DeaMoE layer for decoding on the same grouped-GEMM primitive as the baseline (`fused_moe`).

One align launch groups the routing twice: (token, department) pairs by department (each pair
once, however many of its experts the token picked) and (token, expert) pairs by expert. Then
  1. dept GEMM     A1[t,j] = sigma(Wg[j] x_t) | sigma(Wu[j] x_t)         (EPI_BOTH, rows by dept)
  2. expert GEMM   Y[p]    = silu(Ag[e] a_g) * (Au[e] a_u)               (EPI_SWIGLU, rows by expert,
                                                                           input row (t, dept(e)))
  3. expert GEMM   S[t,j] += w_p * sigma(Ad[e] Y[p])                     (atomic: sum within dept)
  4. dept GEMM     out[t] += Wd[j] S[t,j]                                (atomic: sum over depts)
Launches: align (1, its spare programs zero S and out), four GEMMs (4), cast (1) -- two more
GEMMs than the baseline, the only structural difference.  Department weights are loaded once
per step for all tokens that use them, which is where the byte saving comes from.  With
split_launches=n the departments (and their experts) are cut into n contiguous parts, each
part's four GEMMs on its own CUDA stream (streams.py; the baseline's option too, NOTES.md v13).

sigma = rmsnorm (parameter-free over h_ffn) needs the whole row, which a tile does not see: for
it stages 1 and 3 write raw values and torch applies `deamoe.model.layers.operator` in between
(a correctness path for the Table 4 ablation, not a fast one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.grouped_gemm import (
    EPI_ACT,
    EPI_BOTH,
    EPI_SWIGLU,
    ROW_PAIR,
    ROW_TOKDEPT,
    ROW_TOKEN,
    TileConfig,
    grouped_gemm,
)
from deamoe.kernels.routing_topk import route_layer
from deamoe.kernels.streams import run_parallel, split_ranges

FUSED_OPERATORS = ("silu", "gelu", "none")


@dataclass(frozen=True)
class DeaMoETiles:
    dept_block_m: int = 16
    expert_block_m: int = 16
    dept_up: TileConfig = TileConfig()
    expert_up: TileConfig = TileConfig()
    expert_down: TileConfig = TileConfig()
    dept_down: TileConfig = TileConfig()
    # n > 1: the departments in n contiguous parts, each part's four GEMMs on its own CUDA
    # stream (streams.py; fused operators only)
    split_launches: int = 1


def _torch_operator(name: str):
    from deamoe.model.layers import operator

    return operator(name)


def deamoe_stages(x, dept_gate, dept_up, dept_down, expert_gate, expert_up, expert_down, ids,
                  weights, operator: str = "silu", tiles: DeaMoETiles = DeaMoETiles()):
    """(out, [(stage name, launch, weight tensors it streams)]) -- run the launches in order."""
    T, h = x.shape
    n_dept, f, _ = dept_gate.shape
    n_expert = expert_gate.shape[0]
    if n_expert % n_dept:
        raise ValueError(f"deamoe_forward: n_expert={n_expert} not divisible by n_dept={n_dept}")
    if ids.shape != weights.shape or ids.shape[0] != T:
        raise ValueError(f"deamoe_forward: ids {tuple(ids.shape)} / weights {tuple(weights.shape)} vs x {tuple(x.shape)}")
    per = n_expert // n_dept
    fused = operator in FUSED_OPERATORS
    sig = operator if fused else "none"
    x = x.contiguous()
    weights = weights.contiguous()
    dev, P = x.device, ids.numel()
    common = dict(n_dept=n_dept, per_group=per)
    a1 = torch.empty(T * n_dept, 2 * f, dtype=x.dtype, device=dev)
    y = torch.empty(P, f, dtype=x.dtype, device=dev)
    acc = torch.empty(T * n_dept * f + T * h, dtype=torch.float32, device=dev)
    s, out = acc[: T * n_dept * f].view(T * n_dept, f), acc[T * n_dept * f :].view(T, h)
    al = []

    def do_align():  # both groupings in one launch, which also zeroes S and out
        al[:] = align(
            ids,
            AlignSpec(n_groups=n_dept, per_group=per, dedup=True, block_m=tiles.dept_block_m),
            AlignSpec(n_groups=n_expert, block_m=tiles.expert_block_m),
            zero=acc,
        )

    # each GEMM once; `groups` restricts it to some departments (or their experts)
    def dept_up_gemm(groups=None):
        grouped_gemm(x, dept_gate, a1, al[0], ids, bu=dept_up, a_mode=ROW_TOKEN,
                     c_mode=ROW_TOKDEPT, epi=EPI_BOTH, act=sig, c_up_off=f, tile=tiles.dept_up,
                     groups=groups, **common)

    def expert_up_gemm(groups=None):
        grouped_gemm(a1, expert_gate, y, al[1], ids, bu=expert_up, a_mode=ROW_TOKDEPT,
                     c_mode=ROW_PAIR, epi=EPI_SWIGLU, a_up_off=f, tile=tiles.expert_up,
                     groups=groups, **common)

    def expert_down_gemm(groups=None):
        grouped_gemm(y, expert_down, s, al[1], ids, weights=weights, a_mode=ROW_PAIR,
                     c_mode=ROW_TOKDEPT, epi=EPI_ACT, act=sig, atomic=True,
                     tile=tiles.expert_down, groups=groups, **common)

    def dept_down_gemm(groups=None):
        grouped_gemm(s, dept_down, out, al[0], ids, a_mode=ROW_TOKDEPT, c_mode=ROW_TOKEN,
                     epi=EPI_ACT, atomic=True, tile=tiles.dept_down, groups=groups, **common)

    if fused and tiles.split_launches > 1:
        def part(lo, hi):  # the four GEMMs of departments lo..hi-1 and their experts
            return [lambda: dept_up_gemm((lo, hi)), lambda: expert_up_gemm((lo * per, hi * per)),
                    lambda: expert_down_gemm((lo * per, hi * per)),
                    lambda: dept_down_gemm((lo, hi))]

        def split():
            run_parallel([part(lo, hi) for lo, hi in split_ranges(n_dept, tiles.split_launches)],
                         x.device)
        return out, [("align", do_align, ()),
                     ("gemms", split, (dept_gate, dept_up, expert_gate, expert_up, expert_down,
                                       dept_down))]

    def dept_up_stage():
        dept_up_gemm()
        if not fused:
            op = _torch_operator(operator)
            a1.copy_(op(a1.view(T * n_dept, 2, f).float()).view(T * n_dept, 2 * f))

    def expert_down_stage():
        if fused:
            expert_down_gemm()
            return
        z = torch.empty(P, f, dtype=torch.float32, device=dev)
        grouped_gemm(y, expert_down, z, al[1], ids, a_mode=ROW_PAIR, c_mode=ROW_PAIR,
                     epi=EPI_ACT, tile=tiles.expert_down, **common)
        z = _torch_operator(operator)(z) * weights.reshape(P, 1).float()
        rows = torch.arange(P, device=dev) // ids.shape[1] * n_dept + ids.reshape(P) // per
        s.index_add_(0, rows, z)

    stages = [
        ("align", do_align, ()),
        ("dept_up", dept_up_stage, (dept_gate, dept_up)),
        ("expert_up", expert_up_gemm, (expert_gate, expert_up)),
        ("expert_down", expert_down_stage, (expert_down,)),
        ("dept_down", dept_down_gemm, (dept_down,)),
    ]
    return out, stages


def deamoe_forward(x, dept_gate, dept_up, dept_down, expert_gate, expert_up, expert_down, ids,
                   weights, operator: str = "silu", tiles: DeaMoETiles = DeaMoETiles()) -> torch.Tensor:
    """DeaMoE FFN output [T, h] for routing ids/weights [T, k] (experts numbered department-major)."""
    out, stages = deamoe_stages(x, dept_gate, dept_up, dept_down, expert_gate, expert_up,
                                expert_down, ids, weights, operator, tiles)
    for _, launch, _ in stages:
        launch()
    return out.to(x.dtype)


def deamoe_layer(layer, x: torch.Tensor, ids=None, weights=None, tiles: DeaMoETiles = DeaMoETiles()):
    """Run a `deamoe.model.layers.DeaMoE` with the kernel (routing by the layer's router unless given)."""
    lead, h = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, h)
    if ids is None:
        ids, weights = route_layer(layer, x)
    out = deamoe_forward(
        x, layer.dept_gate, layer.dept_up, layer.dept_down, layer.expert_gate, layer.expert_up,
        layer.expert_down, ids, weights, operator=layer.shape.operator, tiles=tiles,
    )
    return out.reshape(*lead, h)
