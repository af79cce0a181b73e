"""DeaMoE layer for decoding on the same grouped-GEMM primitive as the baseline (`fused_moe`).

One align launch groups the routing twice: (token, department) pairs by department (each pair
once, however many of its experts the token picked) and (token, expert) pairs by expert. Then
  1. dept GEMM     A1[t,j] = sigma(Wg[j] x_t) | sigma(Wu[j] x_t)         (EPI_BOTH, rows by dept)
  2. expert GEMM   Y[p]    = silu(Ag[e] a_g) * (Au[e] a_u)               (EPI_SWIGLU, rows by expert,
                                                                           input row (t, dept(e)))
  3. expert GEMM   S[t,j] += w_p * sigma(Ad[e] Y[p])                     (atomic: sum within dept)
  4. dept GEMM     out[t] += Wd[j] S[t,j]                                (atomic: sum over depts)
Launches: align (1, its spare programs zero S and out), four GEMMs (4), a cast (1) only where out
is summed in fp32 (grouped_gemm.OUT_BF16) -- two more GEMMs than the baseline, the only
structural difference.  Department weights are loaded once per step for all tokens that use
them, which is where the byte saving comes from.  With split_launches=n the departments (and
their experts) are cut into n contiguous parts, each part's four GEMMs on its own CUDA stream
(streams.py; the baseline's option too, NOTES.md v13).
With dense_dept_up, GEMM 1 runs for every (token, department) -- no routing needed, since at
>= 4 tokens nearly every department is used anyway -- on a side stream while the main stream
runs the router, routing and align (given as `route`), so the layer's head hides behind
weight streaming (NOTES.md v14; the baseline's w13 needs its routing: it has no such option).
It streams every department, chosen or not (at 4 tokens ~0.2 of 8 go unchosen: NOTES.md v52);
with dense_parts only the first parts' departments are dense, and the other parts run a routed
GEMM 1 in their chains as soon as the routing is known (streams.run_forked).

sigma = rmsnorm (parameter-free over h_ffn) needs the whole row, which a tile does not see: for
it stages 1 and 3 write raw values and torch applies `deamoe.model.layers.operator` in between
(a correctness path for the Table 4 ablation, not a fast one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deamoe.kernels.align import AlignSpec, align, dense_alignment
from deamoe.kernels.grouped_gemm import (
    EPI_ACT,
    EPI_BOTH,
    EPI_SWIGLU,
    ROW_PAIR,
    ROW_TOKDEPT,
    ROW_TOKEN,
    TileConfig,
    bf16_atomics,
    grouped_gemm,
    layer_output,
)
from deamoe.kernels.routing_topk import route_layer
from deamoe.kernels.streams import run_forked, run_parallel, split_ranges

FUSED_OPERATORS = ("silu", "gelu", "none")
# S in bf16 for bf16 layers on CUDA (NOTES.md v45: 0.4-15 us faster per layer, rel err 4.1e-3 to
# 4.6e-3 against 3.7e-3 to 3.9e-3): expert_down adds into S with bf16 atomics and dept_down reads
# half the bytes of S per N tile; S and out still share one zeroed buffer.  fp32 S elsewhere
# (grouped_gemm.bf16_atomics: no bf16 atomics under the interpreter; fp32 layers keep fp32).
S_BF16 = True


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
    # True: the department up-projection for every (token, department), on a side stream
    # started before the routing (needs no routing; same bytes when every department is used)
    dense_dept_up: bool = False
    # rows per block of the dense GEMM (0: dept_block_m); with all of a department's tokens in
    # one block its weights stream once, and fewer programs leave SMs to the routing (v14c)
    dense_block_m: int = 0
    # with dense_dept_up and split_launches = n: only the first dense_parts of the n parts take
    # their department up-projection from the dense GEMM; the others run it routed at the head
    # of their own chain, which starts once the routing is known, beside the dense GEMM's tail
    # and without reading their unchosen departments (NOTES.md v53).  0: every part is dense
    dense_parts: int = 0


def dept_up_gemm(x, dept_gate, dept_up, a1, al, rows, per_group: int, tile: TileConfig,
                 act: str = "silu", groups=None) -> None:
    """GEMM 1 for the (token, department) rows of `al` (routed, or `dense_alignment`):
    a1[(t, j)] = act(Wg[j] x_t) | act(Wu[j] x_t).  Also what the department benchmarks time."""
    n_dept, f, _ = dept_gate.shape
    grouped_gemm(x, dept_gate, a1, al, rows, bu=dept_up, a_mode=ROW_TOKEN, c_mode=ROW_TOKDEPT,
                 epi=EPI_BOTH, act=act, c_up_off=f, tile=tile, groups=groups, n_dept=n_dept,
                 per_group=per_group)


def dept_down_gemm(s, dept_down, out, al, ids, per_group: int, tile: TileConfig,
                   groups=None) -> None:
    """GEMM 4: out[t] += Wd[j] S[(t, j)] over the routed (token, department) rows of `al`."""
    grouped_gemm(s, dept_down, out, al, ids, a_mode=ROW_TOKDEPT, c_mode=ROW_TOKEN, epi=EPI_ACT,
                 atomic=True, tile=tile, groups=groups, n_dept=dept_down.shape[0],
                 per_group=per_group)


def _torch_operator(name: str):
    from deamoe.model.layers import operator

    return operator(name)


def deamoe_stages(x, dept_gate, dept_up, dept_down, expert_gate, expert_up, expert_down, ids,
                  weights, operator: str = "silu", tiles: DeaMoETiles = DeaMoETiles(), route=None):
    """(out, [(stage name, launch, weight tensors it streams)]) -- run the launches in order.

    route: optional callable -> (ids, weights), run as the first stage (pass ids=weights=None);
    with tiles.dense_dept_up it runs beside the department up-projection."""
    T, h = x.shape
    n_dept, f, _ = dept_gate.shape
    n_expert = expert_gate.shape[0]
    if n_expert % n_dept:
        raise ValueError(f"deamoe_forward: n_expert={n_expert} not divisible by n_dept={n_dept}")
    if (route is None) == (ids is None):
        raise ValueError("deamoe_forward: pass either ids/weights or route (exactly one)")
    per = n_expert // n_dept
    fused = operator in FUSED_OPERATORS
    sig = operator if fused else "none"
    x = x.contiguous()
    dev = x.device
    common = dict(n_dept=n_dept, per_group=per)
    a1 = torch.empty(T * n_dept, 2 * f, dtype=x.dtype, device=dev)
    s_bf16 = S_BF16 and fused and f % 2 == 0 and bf16_atomics(x)
    s_words = T * n_dept * f // 2 if s_bf16 else T * n_dept * f
    acc, out = layer_output(x, s_words)
    s = acc[:s_words]
    s = (s.view(torch.bfloat16) if s_bf16 else s).view(T * n_dept, f)
    st = {}  # the routing and what depends on its size, set by take_routing

    def take_routing(r_ids, r_weights):
        if r_ids.shape != r_weights.shape or r_ids.shape[0] != T:
            raise ValueError(f"deamoe_forward: ids {tuple(r_ids.shape)} / weights "
                             f"{tuple(r_weights.shape)} vs x {tuple(x.shape)}")
        st.update(ids=r_ids, weights=r_weights.contiguous(),
                  y=torch.empty(r_ids.numel(), f, dtype=x.dtype, device=dev))

    if route is None:
        take_routing(ids, weights)

    def do_route():
        take_routing(*route())

    def do_align():  # both groupings in one launch, which also zeroes S and out
        st["al"] = align(
            st["ids"],
            AlignSpec(n_groups=n_dept, per_group=per, dedup=True, block_m=tiles.dept_block_m),
            AlignSpec(n_groups=n_expert, block_m=tiles.expert_block_m),
            zero=acc,
        )

    # each GEMM once; `groups` restricts it to some departments (or their experts)
    def dept_up_stage_gemm(groups=None, dense=False):
        if dense:  # every (token, department) row of a1: needs no routing
            al, rows = dense_alignment(T, n_dept, per, tiles.dense_block_m or tiles.dept_block_m,
                                       dev)
        else:
            al, rows = st["al"][0], st["ids"]
        dept_up_gemm(x, dept_gate, dept_up, a1, al, rows, per, tiles.dept_up, sig, groups)

    def expert_up_gemm(groups=None):
        grouped_gemm(a1, expert_gate, st["y"], st["al"][1], st["ids"], bu=expert_up,
                     a_mode=ROW_TOKDEPT, c_mode=ROW_PAIR, epi=EPI_SWIGLU, a_up_off=f,
                     tile=tiles.expert_up, groups=groups, **common)

    def expert_down_gemm(groups=None):
        grouped_gemm(st["y"], expert_down, s, st["al"][1], st["ids"], weights=st["weights"],
                     a_mode=ROW_PAIR, c_mode=ROW_TOKDEPT, epi=EPI_ACT, act=sig, atomic=True,
                     tile=tiles.expert_down, groups=groups, **common)

    def dept_down_stage_gemm(groups=None):
        dept_down_gemm(s, dept_down, out, st["al"][0], st["ids"], per, tiles.dept_down, groups)

    def apply_operator():  # sigma outside the kernel (rmsnorm needs the whole row)
        op = _torch_operator(operator)
        a1.copy_(op(a1.view(T * n_dept, 2, f).float()).view(T * n_dept, 2 * f))

    def part(lo, hi, routed_up):  # the GEMMs of departments lo..hi-1 and their experts
        up = [lambda: dept_up_stage_gemm((lo, hi))] if routed_up else []
        return up + [lambda: expert_up_gemm((lo * per, hi * per)),
                     lambda: expert_down_gemm((lo * per, hi * per)),
                     lambda: dept_down_stage_gemm((lo, hi))]

    head = [] if route is None else [("route", do_route, ())]
    head.append(("align", do_align, ()))
    if tiles.dense_parts and (not tiles.dense_dept_up or not 0 < tiles.dense_parts
                              < min(tiles.split_launches, n_dept)):
        raise ValueError(f"deamoe_forward: dense_parts={tiles.dense_parts} needs dense_dept_up "
                         f"and 0 < dense_parts < split_launches={tiles.split_launches}")
    if tiles.dense_parts and fused:  # dense GEMM for the first parts, routed in the others
        ranges = split_ranges(n_dept, tiles.split_launches)
        n_dense = tiles.dense_parts

        def dense_then_parts():
            run_forked([launch for _, launch, _ in head],
                       [lambda: dept_up_stage_gemm((0, ranges[n_dense - 1][1]), dense=True)],
                       [part(lo, hi, True) for lo, hi in ranges[n_dense:]],
                       [part(lo, hi, False) for lo, hi in ranges[:n_dense]], dev)
        return out, [("route+align | dense dept_up of some parts, then all parts",
                      dense_then_parts, (dept_gate, dept_up, expert_gate, expert_up,
                                         expert_down, dept_down))]
    if tiles.dense_dept_up:
        dense = [lambda: dept_up_stage_gemm(dense=True)] + ([] if fused else [apply_operator])
        routed = [launch for _, launch, _ in head]

        def route_beside_dept_up():  # routing + align on this stream, dept_up on a side one
            run_parallel([routed, dense], dev)
        head = [("route+align | dense dept_up", route_beside_dept_up, (dept_gate, dept_up))]

    if fused and tiles.split_launches > 1:
        def split():
            run_parallel([part(lo, hi, not tiles.dense_dept_up)
                          for lo, hi in split_ranges(n_dept, tiles.split_launches)], dev)
        return out, head + [("gemms", split, (dept_gate, dept_up, expert_gate, expert_up,
                                              expert_down, dept_down))]

    def dept_up_stage():
        dept_up_stage_gemm()
        if not fused:
            apply_operator()

    def expert_down_stage():
        if fused:
            expert_down_gemm()
            return
        ids, y = st["ids"], st["y"]
        P = ids.numel()
        z = torch.empty(P, f, dtype=torch.float32, device=dev)
        grouped_gemm(y, expert_down, z, st["al"][1], ids, a_mode=ROW_PAIR, c_mode=ROW_PAIR,
                     epi=EPI_ACT, tile=tiles.expert_down, **common)
        z = _torch_operator(operator)(z) * st["weights"].reshape(P, 1).float()
        rows = torch.arange(P, device=dev) // ids.shape[1] * n_dept + ids.reshape(P) // per
        s.index_add_(0, rows, z)

    up = [] if tiles.dense_dept_up else [("dept_up", dept_up_stage, (dept_gate, dept_up))]
    stages = head + up + [
        ("expert_up", expert_up_gemm, (expert_gate, expert_up)),
        ("expert_down", expert_down_stage, (expert_down,)),
        ("dept_down", dept_down_stage_gemm, (dept_down,)),
    ]
    return out, stages


def deamoe_forward(x, dept_gate, dept_up, dept_down, expert_gate, expert_up, expert_down, ids,
                   weights, operator: str = "silu", tiles: DeaMoETiles = DeaMoETiles(),
                   route=None) -> torch.Tensor:
    """DeaMoE FFN output [T, h] for routing ids/weights [T, k] (experts numbered department-major).

    Or route: a callable returning (ids, weights), with ids=weights=None: the layer runs it
    itself, beside the department up-projection when tiles.dense_dept_up."""
    out, stages = deamoe_stages(x, dept_gate, dept_up, dept_down, expert_gate, expert_up,
                                expert_down, ids, weights, operator, tiles, route=route)
    for _, launch, _ in stages:
        launch()
    return out.to(x.dtype)


def deamoe_layer(layer, x: torch.Tensor, ids=None, weights=None, tiles: DeaMoETiles = DeaMoETiles()):
    """Run a `deamoe.model.layers.DeaMoE` with the kernel (routing by the layer's router unless given)."""
    lead, h = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, h)
    route = None if ids is not None else (lambda: route_layer(layer, x))
    out = deamoe_forward(
        x, layer.dept_gate, layer.dept_up, layer.dept_down, layer.expert_gate, layer.expert_up,
        layer.expert_down, ids, weights, operator=layer.shape.operator, tiles=tiles, route=route,
    )
    return out.reshape(*lead, h)
