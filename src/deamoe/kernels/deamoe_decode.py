"""DeaMoE layer for decoding on the same grouped-GEMM primitive as the baseline (`fused_moe`).

One align launch groups the routing twice: (token, department) pairs by department (each pair
once, however many of its experts the token picked) and (token, expert) pairs by expert. Then
  1. dept GEMM     A1[t,j] = sigma(Wg[j] x_t) | sigma(Wu[j] x_t)         (EPI_BOTH, rows by dept)
  2. expert GEMM   Y[p]    = silu(Ag[e] a_g) * (Au[e] a_u)               (EPI_SWIGLU, rows by expert,
                                                                           input row (t, dept(e)))
  3. expert GEMM   S[t,j] += w_p * sigma(Ad[e] Y[p])                     (atomic: sum within dept)
  4. dept GEMM     out[t] += Wd[j] S[t,j]                                (atomic: sum over depts)
With pair_dept_down, 3 stores Z[p] = w_p * sigma(Ad[e] Y[p]) per pair (no S) and 4 sums
out[t] += Wd[dept(p)] Z[p] over the pairs grouped by department (the same sum, Wd being linear):
rows a GEMM writes whole, so on w8a8 weights expert_down can store them quantised ('-qo') for
dept_down instead of a quantiser launch over the summed S between them.
Launches: align (1, its spare programs zero S and out, and the absmax slots of the expert
up-projection's output on a w8a8 '-qs' tile), four GEMMs (4), a cast (1) only where out
is summed in fp32 (`DeaMoETiles.out_bf16`) -- two more GEMMs than the baseline, the only
structural difference.  Department weights are loaded once per step for all tokens that use
them, which is where the byte saving comes from.  With split_launches=n the departments (and
their experts) are cut into n contiguous parts, each part's four GEMMs on its own CUDA stream
(streams.py; the baseline's option too): one part's launch ramp and tail overlap another's work.
With dense_dept_up, GEMM 1 runs for every (token, department) -- no routing needed, since at
>= 4 tokens nearly every department is used anyway -- on a side stream while the main stream
runs the router, routing and align (given as `route`), so the layer's head (~13-15 us at 4
tokens) hides behind weight streaming; the baseline's w13 needs its routing, so it has no such
option.  It streams every department, chosen or not (at 4 tokens 0.17-0.51 of 8 go unchosen,
0.6-1.5% of the layer's bytes); with dense_parts only the first parts' departments are dense,
and the other parts run a routed GEMM 1 in their chains as soon as the routing is known
(streams.run_forked).  On w8a8 FP8 weights the dense GEMM 1 may instead run through cuBLAS's
block-scaled FP8 GEMM (dense_up_cublas, fp8_dense_up: faster at >= 128 tokens), the one GEMM of
the layer off the primitive; A1 is then stored planar (gate halves, then up halves).

sigma = rmsnorm (parameter-free over h_ffn) needs the whole row, which a tile does not see: for
it stages 1 and 3 write raw values and torch applies `deamoe.model.layers.operator` in between
(a correctness path for the Table 4 ablation, not a fast one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from deamoe.kernels import fp8_dense_up
from deamoe.kernels.align import AlignSpec, align, dense_alignment
from deamoe.kernels.fp8 import check_qout_reads, check_qscale_writes
from deamoe.kernels.fp8_absmax import AbsmaxRows, with_zeroed
from deamoe.kernels.tile_config import check_layer_knobs
from deamoe.kernels.fp8_quant import gemm_output
from deamoe.kernels.gemm_spec import EPI_ACT, EPI_BOTH, EPI_SWIGLU, ROW_PAIR, ROW_TOKDEPT, ROW_TOKEN, GemmSpec
from deamoe.kernels.grouped_gemm import (
    TileConfig,
    bf16_atomics,
    grouped_gemm,
    layer_output,
    on_tokens,
    run_stages,
)
from deamoe.kernels.routing_topk import route_layer
from deamoe.kernels.streams import run_forked, run_parallel, split_ranges

FUSED_OPERATORS = ("silu", "gelu", "none")

# the four GEMMs (and expert_down without its operator, for the rmsnorm path); each launch adds
# its tile, the act of the layer's operator and the sizes of its weights (GemmSpec.on)
DEPT_UP = GemmSpec(a_mode=ROW_TOKEN, c_mode=ROW_TOKDEPT, epi=EPI_BOTH)
EXPERT_UP = GemmSpec(a_mode=ROW_TOKDEPT, c_mode=ROW_PAIR, epi=EPI_SWIGLU)
EXPERT_DOWN = GemmSpec(a_mode=ROW_PAIR, c_mode=ROW_TOKDEPT, epi=EPI_ACT, atomic=True)
EXPERT_DOWN_RAW = GemmSpec(a_mode=ROW_PAIR, c_mode=ROW_PAIR, epi=EPI_ACT)
DEPT_DOWN = GemmSpec(a_mode=ROW_TOKDEPT, c_mode=ROW_TOKEN, epi=EPI_ACT, atomic=True)
# pair_dept_down: dept_down over pair rows is the baseline's w2 (unweighted: expert_down
# weighted them), grouped by department
DEPT_DOWN_PAIRS = GemmSpec(a_mode=ROW_PAIR, c_mode=ROW_TOKEN, epi=EPI_ACT, atomic=True)


class DeaMoEWeights(NamedTuple):
    """A DeaMoE layer's six weight stacks (deamoe.model.layers.DeaMoE's names, nn.Linear layout;
    bf16, or block-scaled FP8: deamoe.kernels.fp8.Fp8Weight)."""

    dept_gate: torch.Tensor  # [n_dept, h_ffn, h]
    dept_up: torch.Tensor  # [n_dept, h_ffn, h]
    dept_down: torch.Tensor  # [n_dept, h, h_ffn]
    expert_gate: torch.Tensor  # [n_expert, h_ffn, h_ffn]
    expert_up: torch.Tensor  # [n_expert, h_ffn, h_ffn]
    expert_down: torch.Tensor  # [n_expert, h_ffn, h_ffn]

    @classmethod
    def of(cls, source) -> "DeaMoEWeights":
        """From a mapping with these keys (a decode step's weights) or an object with these
        attributes (a DeaMoE layer)."""
        if isinstance(source, Mapping):
            return cls(*(source[name] for name in cls._fields))
        return cls(*(getattr(source, name) for name in cls._fields))


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
    # one block its weights stream once, and fewer programs leave SMs to the routing
    dense_block_m: int = 0
    # with dense_dept_up and split_launches = n: only the first dense_parts of the n parts take
    # their department up-projection from the dense GEMM; the others run it routed at the head
    # of their own chain, which starts once the routing is known, beside the dense GEMM's tail
    # and without reading their unchosen departments.  0: every part is dense
    dense_parts: int = 0
    # with dense_dept_up on w8a8 FP8 weights: that GEMM through cuBLAS's block-scaled FP8 GEMM
    # (kernels.fp8_dense_up; a1 stored planar), not a grouped-GEMM tile
    dense_up_cublas: bool = False
    # sum out in bf16 where the device has bf16 atomics, without the cast launch at the end
    # (both layers 1.3-16.5 us faster per layer on the H200; max rel err 5.9e-3); off: fp32
    out_bf16: bool = True
    # S (the per-(token, department) sum of expert outputs) in bf16 where the device has bf16
    # atomics: dept_down reads half the S bytes per N tile (up to 15 us faster per layer at
    # 96-128 tokens, rel err 4.1-4.6e-3 against 3.7-3.9e-3); off: fp32 S
    s_bf16: bool = True
    # True: expert_down stores each (token, expert) pair's weighted output instead of summing
    # it into S, and dept_down sums those rows, grouped by department (no dedup), into out --
    # the same sum without S, so on w8a8 weights expert_down may store its output quantised
    # ('-qo') for dept_down, which then needs no quantiser launch; dept_down reads k_expert
    # rows a token where it read at most k_dept, and a routed dept_up runs on the same
    # grouping (a (token, department) row written once per pair, the same values).  Fused
    # operators only
    pair_dept_down: bool = False

    def __post_init__(self):
        check_layer_knobs(self)
        t = self.expert_down
        if not self.pair_dept_down and (t.qout or t.qscale):
            raise ValueError(f"expert_down tile {t.name}: it sums its output into S, which no "
                             "tile can store quantised or with its absmax; give "
                             "pair_dept_down=1 (its rows stored whole) or a plain tile")
        if self.pair_dept_down and t.qscale:
            raise ValueError(f"expert_down tile {t.name}: '-qs' with "
                             "pair_dept_down is not built; give '-qo' or a plain tile")
        check_qout_reads(self)
        check_qscale_writes(self)
        if self.dense_up_cublas and (not self.dense_dept_up or self.dense_parts):
            raise ValueError("dense_up_cublas needs dense_dept_up=1 and dense_parts=0 (the "
                             "dense GEMM writes every department's rows)")
        if self.dense_up_cublas and (self.dept_up.qout or self.dept_up.qscale):
            raise ValueError(f"dense_up_cublas: cuBLAS writes the department output whole, not "
                             f"as dept_up tile {self.dept_up.name} stores it")

    def operator_misfit(self, operator: str) -> str | None:
        """Why a layer whose inter-stage operator is `operator` cannot run these tiles (None: it
        can): an operator applied outside the kernel (rmsnorm needs the whole row) changes the
        department output after dept_up, so dept_up cannot store it quantised or with its
        absmax, and pair_dept_down applies the operator inside expert_down.  Checked where the
        tiles meet the layer's shape (decode.knobs.make_tiles) and by the layer itself."""
        if operator in FUSED_OPERATORS:
            return None
        if self.dense_up_cublas:
            return f"dense_up_cublas needs a fused operator ({', '.join(FUSED_OPERATORS)}), not {operator}"
        if self.dept_up.qout or self.dept_up.qscale:
            how = "quantised ('-qo')" if self.dept_up.qout else "with its absmax ('-qs')"
            return (f"operator {operator} is applied to the department output outside the "
                    f"kernel, so dept_up (tile {self.dept_up.name}) cannot store it {how}")
        if self.pair_dept_down:
            return (f"pair_dept_down needs a fused operator ({', '.join(FUSED_OPERATORS)}), "
                    f"not {operator}")
        return None

    def shared_memory(self, itemsize: int = 2, fp8=None) -> int:
        """The most shared memory one of the layer's GEMMs needs on these tiles
        (GemmSpec.shared_memory; S counted at `itemsize`, as with s_bf16; fp8: the Fp8Format of
        FP8 weights)."""
        dept_up_m = ({self.dense_block_m or self.dept_block_m}
                     if self.dense_dept_up and not self.dense_up_cublas else set())
        if not self.dense_dept_up or self.dense_parts:  # the routed department up-projection
            dept_up_m.add(self.dept_block_m)
        sizes = (itemsize, fp8)
        return max([DEPT_UP.on(self.dept_up).shared_memory(m, *sizes) for m in dept_up_m]
                   + [EXPERT_UP.on(self.expert_up).shared_memory(self.expert_block_m, *sizes,
                                                                 self.dept_up.qscale),
                      EXPERT_DOWN.on(self.expert_down).shared_memory(self.expert_block_m, *sizes,
                                                                     self.expert_up.qscale),
                      DEPT_DOWN.on(self.dept_down).shared_memory(self.dept_block_m, *sizes)])


def dept_up_gemm(x, dept_gate, dept_up, a1, al, rows, per_group: int, tile: TileConfig,
                 act: str = "silu", groups=None) -> None:
    """GEMM 1 for the (token, department) rows of `al` (routed, or `dense_alignment`):
    a1[(t, j)] = act(Wg[j] x_t) | act(Wu[j] x_t).  a1 with its absmax ('-qs'): the launch that
    quantises x ('-pq') zeroes the slots of these departments (groups) first."""
    n_dept, f, _ = dept_gate.shape
    spec = DEPT_UP.on(tile, act=act, c_up_off=f, n_dept=n_dept, per_group=per_group)
    if isinstance(a1, AbsmaxRows):
        a1 = with_zeroed(a1, x.shape[0], n_dept, *(groups or (0, n_dept)))
    grouped_gemm(x, dept_gate, a1, al, rows, spec, bu=dept_up, groups=groups)


def dept_down_gemm(s, dept_down, out, al, ids, per_group: int, tile: TileConfig,
                   groups=None) -> None:
    """GEMM 4: out[t] += Wd[j] S[(t, j)] over the routed (token, department) rows of `al`."""
    spec = DEPT_DOWN.on(tile, n_dept=dept_down.shape[0], per_group=per_group)
    grouped_gemm(s, dept_down, out, al, ids, spec, groups=groups)


def _torch_operator(name: str):
    from deamoe.model.layers import operator

    return operator(name)


class _Step:
    """One decode step's buffers and its GEMM launches; `deamoe_stages` orders them.  Each GEMM
    takes `groups` to restrict it to some departments (or their experts)."""

    def __init__(self, x, w: DeaMoEWeights, operator: str, tiles: DeaMoETiles):
        self.dept_gate, self.dept_up_w, self.dept_down_w = w.dept_gate, w.dept_up, w.dept_down
        self.expert_gate, self.expert_up_w = w.expert_gate, w.expert_up
        self.expert_down_w = w.expert_down
        T, _ = x.shape
        self.n_dept, f, _ = self.dept_gate.shape
        n_expert = self.expert_gate.shape[0]
        if n_expert % self.n_dept:
            raise ValueError(f"deamoe_forward: n_expert={n_expert} not divisible by "
                             f"n_dept={self.n_dept}")
        self.T, self.f, self.n_expert = T, f, n_expert
        self.per = n_expert // self.n_dept
        self.operator, self.tiles = operator, tiles
        self.fused = operator in FUSED_OPERATORS
        self.sig = operator if self.fused else "none"
        self.x = x.contiguous()
        self.dev = x.device
        common = dict(n_dept=self.n_dept, per_group=self.per)
        self.cublas = tiles.dense_up_cublas
        if self.cublas:  # a1 planar: the up halves after all T x n_dept gate halves
            why = fp8_dense_up.misfit(x, w.dept_gate, w.dept_up, operator)
            if why:
                raise ValueError(f"deamoe_forward: dense_up_cublas: {why}")
        up_off = T * self.n_dept * f if self.cublas else f
        self.specs = {"expert_up": EXPERT_UP.on(tiles.expert_up, a_up_off=up_off, **common),
                      "expert_down": EXPERT_DOWN.on(tiles.expert_down, act=self.sig, **common),
                      "expert_down_pairs": EXPERT_DOWN_RAW.on(tiles.expert_down, act=self.sig,
                                                              **common),
                      "dept_down_pairs": DEPT_DOWN_PAIRS.on(tiles.dept_down, **common),
                      "expert_down_raw": EXPERT_DOWN_RAW.on(tiles.expert_down, **common)}
        why = tiles.operator_misfit(operator)
        if why:
            raise ValueError(f"deamoe_forward: {why}")
        self.a1 = (fp8_dense_up.planar_rows(T, self.n_dept, f, x) if self.cublas
                   else gemm_output(T * self.n_dept, 2 * f, x, tiles.dept_up, w.dept_gate))
        s_bf16 = tiles.s_bf16 and self.fused and f % 2 == 0 and bf16_atomics(x)
        s_words = (0 if tiles.pair_dept_down else T * self.n_dept * f // 2 if s_bf16
                   else T * self.n_dept * f)
        self.acc, self.out = layer_output(self.x, s_words, tiles.out_bf16)
        s = self.acc[:s_words]
        self.s = (s.view(torch.bfloat16) if s_bf16 else s).view(-1, f)
        self.st = {}  # the routing and what depends on its size, set by take_routing

    def weights(self) -> tuple:
        return (self.dept_gate, self.dept_up_w, self.expert_gate, self.expert_up_w,
                self.expert_down_w, self.dept_down_w)

    def take_routing(self, ids, weights):
        if ids.shape != weights.shape or ids.shape[0] != self.T:
            raise ValueError(f"deamoe_forward: ids {tuple(ids.shape)} / weights "
                             f"{tuple(weights.shape)} vs x {tuple(self.x.shape)}")
        self.st.update(ids=ids, weights=weights.contiguous(),
                       y=gemm_output(ids.numel(), self.f, self.x, self.tiles.expert_up,
                                     self.expert_gate))
        if self.tiles.pair_dept_down:  # expert_down's rows, one per pair, read by dept_down
            self.st["z"] = gemm_output(ids.numel(), self.f, self.x, self.tiles.expert_down,
                                       self.expert_down_w)

    def align(self):  # both groupings in one launch, which also zeroes S and out
        t, y = self.tiles, self.st["y"]  # (and the absmax slots of y on a '-qs' expert_up)
        self.st["al"] = align(
            self.st["ids"],
            AlignSpec(n_groups=self.n_dept, per_group=self.per, dedup=not t.pair_dept_down,
                      block_m=t.dept_block_m),
            AlignSpec(n_groups=self.n_expert, block_m=t.expert_block_m),
            zero=(self.acc, y.absmax) if isinstance(y, AbsmaxRows) else self.acc,
        )

    def dept_up(self, groups=None, dense=False):
        if dense and self.cublas:  # (dense_parts 0: every department, groups None)
            fp8_dense_up.dense_dept_up(self.x, self.dept_gate, self.dept_up_w, self.a1, self.sig)
            return
        if dense:  # every (token, department) row of a1: needs no routing
            al, rows = dense_alignment(self.T, self.n_dept, self.per,
                                       self.tiles.dense_block_m or self.tiles.dept_block_m,
                                       self.dev)
        else:
            al, rows = self.st["al"][0], self.st["ids"]
        dept_up_gemm(self.x, self.dept_gate, self.dept_up_w, self.a1, al, rows, self.per,
                     self.tiles.dept_up, self.sig, groups)

    def expert_up(self, groups=None):
        grouped_gemm(self.a1, self.expert_gate, self.st["y"], self.st["al"][1], self.st["ids"],
                     self.specs["expert_up"], bu=self.expert_up_w, groups=groups)

    def expert_down(self, groups=None):
        pairs = self.tiles.pair_dept_down
        grouped_gemm(self.st["y"], self.expert_down_w, self.st["z"] if pairs else self.s,
                     self.st["al"][1], self.st["ids"],
                     self.specs["expert_down_pairs" if pairs else "expert_down"],
                     weights=self.st["weights"], groups=groups)

    def dept_down(self, groups=None):
        if self.tiles.pair_dept_down:
            grouped_gemm(self.st["z"], self.dept_down_w, self.out, self.st["al"][0],
                         self.st["ids"], self.specs["dept_down_pairs"], groups=groups)
            return
        dept_down_gemm(self.s, self.dept_down_w, self.out, self.st["al"][0], self.st["ids"],
                       self.per, self.tiles.dept_down, groups)

    def apply_operator(self):  # sigma outside the kernel (rmsnorm needs the whole row)
        T, n, f = self.T, self.n_dept, self.f
        op = _torch_operator(self.operator)
        self.a1.copy_(op(self.a1.view(T * n, 2, f).float()).view(T * n, 2 * f))

    def dept_up_stage(self):
        self.dept_up()
        if not self.fused:
            self.apply_operator()

    def expert_down_stage(self):
        if self.fused:
            self.expert_down()
            return
        ids, y = self.st["ids"], self.st["y"]
        P = ids.numel()
        z = torch.empty(P, self.f, dtype=torch.float32, device=self.dev)
        grouped_gemm(y, self.expert_down_w, z, self.st["al"][1], ids,
                     self.specs["expert_down_raw"])
        z = _torch_operator(self.operator)(z) * self.st["weights"].reshape(P, 1).float()
        token = torch.arange(P, device=self.dev) // ids.shape[1]
        rows = token * self.n_dept + ids.reshape(P) // self.per
        self.s.index_add_(0, rows, z)

    def part(self, lo, hi, routed_up):  # the GEMMs of departments lo..hi-1 and their experts
        up = [lambda: self.dept_up((lo, hi))] if routed_up else []
        per = self.per
        return up + [lambda: self.expert_up((lo * per, hi * per)),
                     lambda: self.expert_down((lo * per, hi * per)),
                     lambda: self.dept_down((lo, hi))]


def _check_dense_parts(tiles: DeaMoETiles, n_dept: int) -> None:
    if tiles.dense_parts and (not tiles.dense_dept_up or not 0 < tiles.dense_parts
                              < min(tiles.split_launches, n_dept)):
        raise ValueError(f"deamoe_forward: dense_parts={tiles.dense_parts} needs dense_dept_up "
                         f"and 0 < dense_parts < split_launches={tiles.split_launches}")


def deamoe_stages(x, w: DeaMoEWeights, ids, weights, operator: str = "silu",
                  tiles: DeaMoETiles = DeaMoETiles(), route=None):
    """(out, [(stage name, launch, weight tensors it streams)]) -- run the launches in order.

    route: optional callable -> (ids, weights), run as the first stage (pass ids=weights=None);
    with tiles.dense_dept_up it runs beside the department up-projection."""
    if (route is None) == (ids is None):
        raise ValueError("deamoe_forward: pass either ids/weights or route (exactly one)")
    step = _Step(x, w, operator, tiles)
    if route is None:
        step.take_routing(ids, weights)
    head = [] if route is None else [("route", lambda: step.take_routing(*route()), ())]
    head.append(("align", step.align, ()))
    _check_dense_parts(tiles, step.n_dept)
    if tiles.dense_parts and step.fused:  # dense GEMM for the first parts, routed in the others
        ranges = split_ranges(step.n_dept, tiles.split_launches)
        n_dense = tiles.dense_parts

        def dense_then_parts():
            run_forked([launch for _, launch, _ in head],
                       [lambda: step.dept_up((0, ranges[n_dense - 1][1]), dense=True)],
                       [step.part(lo, hi, True) for lo, hi in ranges[n_dense:]],
                       [step.part(lo, hi, False) for lo, hi in ranges[:n_dense]], step.dev)
        return step.out, [("route+align | dense dept_up of some parts, then all parts",
                           dense_then_parts, step.weights())]
    if tiles.dense_dept_up:
        dense = [lambda: step.dept_up(dense=True)] + ([] if step.fused else [step.apply_operator])
        routed = [launch for _, launch, _ in head]

        def route_beside_dept_up():  # routing + align on this stream, dept_up on a side one
            run_parallel([routed, dense], step.dev)
        head = [("route+align | dense dept_up", route_beside_dept_up, (w.dept_gate, w.dept_up))]

    if step.fused and tiles.split_launches > 1:
        def split():
            run_parallel([step.part(lo, hi, not tiles.dense_dept_up)
                          for lo, hi in split_ranges(step.n_dept, tiles.split_launches)], step.dev)
        return step.out, head + [("gemms", split, step.weights())]

    up = ([] if tiles.dense_dept_up
          else [("dept_up", step.dept_up_stage, (w.dept_gate, w.dept_up))])
    return step.out, head + up + [
        ("expert_up", step.expert_up, (w.expert_gate, w.expert_up)),
        ("expert_down", step.expert_down_stage, (w.expert_down,)),
        ("dept_down", step.dept_down, (w.dept_down,)),
    ]


def deamoe_forward(x, w: DeaMoEWeights, ids, weights, operator: str = "silu",
                   tiles: DeaMoETiles = DeaMoETiles(), route=None) -> torch.Tensor:
    """DeaMoE FFN output [T, h] for routing ids/weights [T, k] (experts numbered department-major).

    Or route: a callable returning (ids, weights), with ids=weights=None: the layer runs it
    itself, beside the department up-projection when tiles.dense_dept_up."""
    out, stages = deamoe_stages(x, w, ids, weights, operator, tiles, route=route)
    return run_stages(out, stages, x)


def deamoe_layer(layer, x: torch.Tensor, ids=None, weights=None, tiles: DeaMoETiles = DeaMoETiles()):
    """Run a `deamoe.model.layers.DeaMoE` with the kernel (routing by the layer's router unless given)."""
    def run(x2):
        route = None if ids is not None else (lambda: route_layer(layer, x2))
        return deamoe_forward(x2, DeaMoEWeights.of(layer), ids, weights,
                              operator=layer.shape.operator, tiles=tiles, route=route)
    return on_tokens(x, run)
