"""Block-scaled FP8 weights: the one definition of the format the decode kernels, the battery, the
benchmarks, the loaded-bytes analysis and serving use.

A weight matrix W [N, K] (nn.Linear layout; a stack [G, N, K] quantised matrix by matrix) is
stored as DeepSeek-V3 ships its experts: e4m3 values Q [.., N, K] and one float32 scale per
block of block_n x block_k elements (128 x 128 by default) S [.., ceil(N / block_n),
ceil(K / block_k)], with W ~ Q * S[n // block_n, k // block_k].  A block's scale is its absolute
maximum over 448 (e4m3's largest finite value), so the block's largest element maps to +-448.
Partial blocks at the edges have their own scale.

Activations stay bf16 in and out of a layer.  `Fp8Format.activations` chooses how a GEMM meets
its weights:
  "bf16"  weight-only (w8a16): each FP8 weight tile is widened to the activations' dtype in
          registers (exact: every e4m3 value is a bf16 value), the MMA runs in bf16, and each
          K block's partial product is multiplied by its block scale in the main loop.
  "fp8"   w8a8, as vLLM's block-quantised FP8 path: the activations are quantised per (row,
          block_k columns) group -- scale = max(|a|) / 448 over the group -- the MMA runs on FP8
          operands (Hopper's FP8 tensor cores) and each partial product is multiplied by both
          scales.  Our GEMM quantises the A tile in its load (BLOCK_K = block_k, so a tile row is
          one group); vLLM quantises in a launch before each GEMM: the same groups and scales.
          An up-projection on a '-qo' tile stores its output quantised in groups of its BLOCK_N
          columns, which may be finer than block_k (64 of 128: each scale, so each value's
          rounding step, at most the 128-column group's), so that it can run 64-column tiles;
          the GEMM reading it then steps K by at most one group.  On a '-qs' tile it stores
          its output as it is and gathers each row's absmax per block_k columns beside it
          (deamoe.kernels.fp8_absmax), and the GEMM reading it quantises its A tile with that.
The router stays bf16 (DeepSeek-V3 does not quantise its gate either).

Torch only (no Triton): the quantiser, the dequantising float32 reference and the activation
quantiser the tests and the CPU peer use as reference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

E4M3_MAX = 448.0
E4M3 = torch.float8_e4m3fn
ACTIVATIONS = ("bf16", "fp8")
# the precisions a layer can run in, as the microbenchmark, the peer and serving name them
PRECISIONS = ("bf16", "fp8", "fp8-w8a8")
# the shortest K step of an MMA on two e4m3 operands that Triton compiles for an NVIDIA GPU (its
# min_dot_size for 8-bit types); the interpreter runs any, so the rule is ours to keep
FP8_MMA_MIN_K = 32


@dataclass(frozen=True)
class Fp8Format:
    """The block size of the weight scales and how activations meet FP8 weights (module doc)."""

    block_n: int = 128
    block_k: int = 128
    activations: str = "bf16"

    def __post_init__(self):
        if self.activations not in ACTIVATIONS:
            raise ValueError(f"fp8: activations={self.activations!r} is not one of "
                             f"{', '.join(ACTIVATIONS)}")
        for name in ("block_n", "block_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"fp8: {name}={v!r} must be a power of two >= 16")

    @property
    def precision(self) -> str:
        """The layer's precision label: "fp8" (weight-only) or "fp8-w8a8"."""
        return "fp8" if self.activations == "bf16" else "fp8-w8a8"

    @classmethod
    def of(cls, precision: str, block: tuple[int, int] = (128, 128)) -> "Fp8Format | None":
        """The format of a precision label (PRECISIONS); None for "bf16"."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        if precision == "bf16":
            return None
        return cls(*block, activations="fp8" if precision == "fp8-w8a8" else "bf16")

    def matrix_bytes(self, n: int, k: int) -> int:
        """Bytes of one [n, k] matrix in this format: n k e4m3 values and its float32 scales."""
        return n * k + 4 * (-(-n // self.block_n)) * (-(-k // self.block_k))

    def fits(self, block_k: int, a_group: int | None = None) -> bool:
        """Whether a GEMM tile of BLOCK_K columns can run on these weights: a K step must not
        straddle two scale blocks, nor (w8a8) two activation groups.  a_group: the columns per
        scale of an A quantised before the GEMM (a '-pq' launch, or the '-qo' tile that wrote
        it); None: w8a8 quantises A in the main loop, one group of block_k per tile row.  A
        w8a8 K step is FP8_MMA_MIN_K columns at least.  (A step over two scale blocks, split in
        registers into a scaled MMA per block, was built and timed: the GEMM alone no faster,
        DeaMoE's layer slower at every point; docs/kernels-fp8-search.md.)"""
        if self.block_k % block_k:
            return False
        if self.activations != "fp8":
            return True
        if block_k < FP8_MMA_MIN_K:
            return False
        return block_k == self.block_k if a_group is None else a_group % block_k == 0

    def a_group(self, preq: bool, stored_group: int | None = None) -> int | None:
        """The columns per scale of A as a GEMM on these weights reads it (fits' a_group): a
        stored output's groups (stored_group: its writer's, a '-qo' tile's BLOCK_N or a '-qs'
        tile's block_k), else block_k where a '-pq' launch quantises it; None where the main
        loop quantises it (w8a8) or nothing does (weight-only).  The one rule of the launch
        (fp8_quant.gemm_operands) and of the checks made before any GPU work."""
        if self.activations != "fp8":
            return None
        if stored_group is not None:
            return stored_group
        return self.block_k if preq else None

    def fits_tile(self, tile) -> bool:
        """fits for a TileConfig on its own: a '-pq' tile quantises A in groups of block_k."""
        return self.fits(tile.block_k, self.block_k if tile.preq else None)

    def fit_tile(self, tile):
        """`tile` (a TileConfig) with BLOCK_K made to fit (vLLM takes min(BLOCK_K, block_k) alike)."""
        if self.fits_tile(tile):
            return tile
        return dataclasses.replace(tile, block_k=self.block_k)


def fit_tiles(tiles, fmt: "Fp8Format | None"):
    """A layer's tiles (MoETiles, DeaMoETiles, SharedTiles) with every GEMM tile made to fit
    `fmt` (Fp8Format.fit_tile); as given for bf16 (fmt None)."""
    if fmt is None or tiles is None:
        return tiles
    fitted = {f.name: fmt.fit_tile(getattr(tiles, f.name)) for f in dataclasses.fields(tiles)
              if hasattr(getattr(tiles, f.name), "block_k")}
    return dataclasses.replace(tiles, **fitted)


def with_preq(tiles):
    """A layer's tiles with every GEMM tile quantising its activations in a launch before the
    GEMM ('-pq', TileConfig.preq; w8a8 only: weight-only FP8 ignores it)."""
    quantised = {f.name: dataclasses.replace(getattr(tiles, f.name), preq=True)
                 for f in dataclasses.fields(tiles) if hasattr(getattr(tiles, f.name), "preq")}
    return dataclasses.replace(tiles, **quantised)


# The GEMMs whose output the next GEMM reads whole (no sum across experts): the ones that can
# store that output quantised for it ('-qo'), each with the GEMM that reads it.
QOUT_READERS = {"w13": "w2", "dept_up": "expert_up", "expert_up": "expert_down"}
UP_PROJECTIONS = tuple(QOUT_READERS)


def with_qout(tiles, fmt: "Fp8Format", ups=UP_PROJECTIONS, group: int | None = None):
    """with_preq(tiles), and the up-projections named in `ups` also storing their output
    quantised for the GEMM after them ('-qo', TileConfig.qout; w8a8 only) in groups of `group`
    columns (default: the weights' block_k, vLLM's groups): BLOCK_N = group, since the epilogue
    quantises a tile's columns as one group, and the reader's BLOCK_K at most one group."""
    group = group or fmt.block_k
    tiles = with_preq(tiles)
    stored = {n: dataclasses.replace(getattr(tiles, n), qout=True, block_n=group)
              for n in ups if hasattr(tiles, n)}
    for up in list(stored):
        reader = stored.get(QOUT_READERS[up], getattr(tiles, QOUT_READERS[up]))
        stored[QOUT_READERS[up]] = dataclasses.replace(reader,
                                                       block_k=min(reader.block_k, group))
    return dataclasses.replace(tiles, **stored)


def qout_readers(tiles) -> dict[str, str]:
    """The GEMMs of a layer's tiles whose output the next GEMM reads whole (writer -> reader):
    the up-projections, and DeaMoE's expert down-projection where dept_down reads its rows
    (DeaMoETiles.pair_dept_down)."""
    pairs = getattr(tiles, "pair_dept_down", False)
    return {**QOUT_READERS, **({"expert_down": "dept_down"} if pairs else {})}


def check_qout_reads(tiles) -> None:
    """A ValueError where a layer's tiles (MoETiles, DeaMoETiles) have a GEMM read a '-qo'
    output (quantised in groups of its writer's BLOCK_N columns) on K steps wider than one
    group: each K step takes one scale per row.  The launch refuses it too; this says so when
    the tiles are made, before any kernel runs."""
    for up, reader in qout_readers(tiles).items():
        w, r = getattr(tiles, up, None), getattr(tiles, reader, None)
        if w is not None and w.qout and r is not None and w.block_n % r.block_k:
            raise ValueError(f"{reader} tile {r.name} reads {up}'s '-qo' output (tile {w.name}: "
                             f"groups of {w.block_n} columns): its BLOCK_K must divide "
                             f"{w.block_n}")
        if w is not None and w.qout and r is not None and r.block_k < FP8_MMA_MIN_K:
            raise ValueError(f"{reader} tile {r.name} reads {up}'s '-qo' output on K steps of "
                             f"{r.block_k}: an MMA on FP8 operands takes {FP8_MMA_MIN_K} columns "
                             f"at least (a '-qo' writer of BLOCK_N >= {FP8_MMA_MIN_K})")


def with_qscale(tiles, ups=UP_PROJECTIONS):
    """with_preq(tiles), and the up-projections named in `ups` also storing their output with
    its absmax per row and group of the weights' block_k ('-qs', TileConfig.qscale; w8a8 only)
    for the GEMM after them, which quantises its A tile with it: no tile size changes (any
    BLOCK_N gathers into the groups; the readers' BLOCK_K fits as on '-pq')."""
    tiles = with_preq(tiles)
    return dataclasses.replace(tiles, **{n: dataclasses.replace(getattr(tiles, n), qscale=True)
                                         for n in ups if hasattr(tiles, n)})


def check_qscale_writes(tiles) -> None:
    """A ValueError where DeaMoE's department up-projection (DeaMoETiles.dept_up) is on a '-qs'
    tile without '-pq': the absmax slots of its output are zeroed by the launch that quantises
    x before it (deamoe.kernels.fp8_absmax: the dense department GEMM runs beside align).  Said
    when the tiles are made, before any kernel runs."""
    t = getattr(tiles, "dept_up", None)
    if t is not None and t.qscale and not t.preq:
        raise ValueError(f"dept_up tile {t.name}: '-qs' on the department up-projection needs "
                         "'-pq': the launch quantising x zeroes its output's absmax slots")


def preq_groups_fit(a_up_off: int, k: int, width: int, block_k: int) -> bool:
    """Whether a GEMM reading K columns of A (rows `width` wide; SwiGLU's up input at column
    a_up_off) can take A quantised before it in groups of block_k: the groups must be the main
    loop's K blocks -- whole ones, a partial one only at a row's end.  grouped_gemm refuses a
    launch where not."""
    return a_up_off % block_k == 0 and (k % block_k == 0 or width == k + a_up_off)


def preq_fits(shape, fmt: "Fp8Format") -> bool:
    """Whether every GEMM of `shape`'s layer can take a '-pq' tile in `fmt`: the one GEMM with
    an up input inside A's rows is DeaMoE's expert up-projection (gate and up halves of the
    department output, h_ffn columns each)."""
    f = shape.h_ffn
    return shape.kind != "deamoe" or preq_groups_fit(f, f, 2 * f, fmt.block_k)


def qout_fits(shape, fmt: "Fp8Format", group: int | None = None) -> bool:
    """Whether `shape`'s layer can take with_qout's tiles in `fmt` (groups of `group` columns,
    default block_k): '-pq' fits, the gate and up halves of each up-projection's output (h_ffn
    columns each) are whole groups, and a group is one K step of the FP8 MMA at least."""
    group = group or fmt.block_k
    return preq_fits(shape, fmt) and shape.h_ffn % group == 0 and group >= FP8_MMA_MIN_K


@dataclass(frozen=True)
class Fp8Weight:
    """A block-scaled FP8 weight (stack): q [.., N, K] e4m3, scale [.., nN, nK] float32, and its
    format.  Indexing indexes the leading (group) dimensions of both, so w[e] is expert e's
    matrix and w[None] a one-group stack."""

    q: torch.Tensor
    scale: torch.Tensor
    fmt: Fp8Format = Fp8Format()

    def __post_init__(self):
        n, k = self.q.shape[-2:]
        want = (*self.q.shape[:-2], -(-n // self.fmt.block_n), -(-k // self.fmt.block_k))
        if self.q.dtype != E4M3 or self.scale.dtype != torch.float32 or self.scale.shape != want:
            raise ValueError(f"Fp8Weight: q {self.q.dtype} {tuple(self.q.shape)} and scale "
                             f"{self.scale.dtype} {tuple(self.scale.shape)} do not make "
                             f"{self.fmt} weights (scale shape {want}, float32)")

    @property
    def shape(self) -> torch.Size:
        return self.q.shape

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def nbytes(self) -> int:
        return self.q.numel() + 4 * self.scale.numel()

    def __getitem__(self, idx) -> "Fp8Weight":
        return Fp8Weight(self.q[idx], self.scale[idx], self.fmt)

    def with_format(self, fmt: Fp8Format) -> "Fp8Weight":
        """The same values under another activation mode (no copy); the block size must match."""
        if (fmt.block_n, fmt.block_k) != (self.fmt.block_n, self.fmt.block_k):
            raise ValueError(f"Fp8Weight: blocks {self.fmt.block_n}x{self.fmt.block_k} "
                             f"cannot be read as {fmt.block_n}x{fmt.block_k}")
        return Fp8Weight(self.q, self.scale, fmt)

    def dequantize(self) -> torch.Tensor:
        """The float32 weights these values stand for: q * the scale of each one's block."""
        n, k = self.q.shape[-2:]
        s = self.scale.repeat_interleave(self.fmt.block_n, -2)[..., :n, :]
        s = s.repeat_interleave(self.fmt.block_k, -1)[..., :k]
        return self.q.float() * s


def gemm_weights_fp8(bg, bu) -> bool:
    """Whether a grouped-GEMM launch's weights are block-scaled FP8: both alike, scales
    contiguous along K; a ValueError naming what does not hold (the tile's fit:
    fp8_quant.gemm_operands)."""
    fp8 = isinstance(bg, Fp8Weight)
    if bu is not None and isinstance(bu, Fp8Weight) != fp8:
        raise ValueError("grouped_gemm: bg and bu must both be FP8 weights or both tensors")
    if not fp8:
        return False
    if bu is not None and (bu.fmt != bg.fmt or bu.scale.stride() != bg.scale.stride()):
        raise ValueError("grouped_gemm: bu's FP8 format and scale layout must be bg's")
    if bg.scale.stride(-1) != 1:
        raise ValueError("grouped_gemm: FP8 scales must be contiguous along K")
    return True


def weight_bytes(w) -> int:
    """Bytes of a weight as the kernels stream it (a tensor, or an Fp8Weight with its scales)."""
    return w.nbytes if isinstance(w, Fp8Weight) else w.numel() * w.element_size()


def is_fp8(w) -> bool:
    return isinstance(w, Fp8Weight)


def quantize(w: torch.Tensor, fmt: Fp8Format = Fp8Format(), chunk_bytes: float = 2**30) -> Fp8Weight:
    """Block-scaled e4m3 values of w [.., N, K] (any float dtype), one scale per block:
    absmax / 448 (1 for an all-zero block), values rounded to nearest.  A stack is quantised
    a few matrices at a time (float32 temporaries under about `chunk_bytes`)."""
    n, k = w.shape[-2:]
    per = max(1, int(chunk_bytes // (4 * n * k)))
    if w.dim() == 3 and w.shape[0] > per:
        parts = [quantize(w[i:i + per], fmt, chunk_bytes) for i in range(0, w.shape[0], per)]
        return Fp8Weight(torch.cat([p.q for p in parts]), torch.cat([p.scale for p in parts]), fmt)
    bn, bk = fmt.block_n, fmt.block_k
    nb, kb = -(-n // bn), -(-k // bk)
    lead = w.shape[:-2]
    padded = torch.zeros(*lead, nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    padded[..., :n, :k] = w.float()
    blocks = padded.view(*lead, nb, bn, kb, bk)
    amax = blocks.abs().amax(dim=(-3, -1))  # [.., nb, kb]
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (blocks / scale[..., :, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    q = q.view(*lead, nb * bn, kb * bk)[..., :n, :k].contiguous()
    return Fp8Weight(q, scale.contiguous(), fmt)


def quantize_activations(a: torch.Tensor, group: int = 128, eps: float = 1e-10):
    """Per (row, `group` columns) e4m3 quantisation of a [R, C] (C a multiple of `group`, or
    one partial last group), as vLLM's per_token_group_quant_fp8: scale = max(|a|, eps) / 448
    over the group, q = clamp(a / scale).  Returns (q [R, C] e4m3, scales [R, ceil(C / group)]
    float32).  The reference of the GEMM's w8a8 A load, and the peer's quantiser on the CPU."""
    r, c = a.shape
    ng = -(-c // group)
    padded = torch.zeros(r, ng * group, dtype=torch.float32, device=a.device)
    padded[:, :c] = a.float()
    groups = padded.view(r, ng, group)
    scale = groups.abs().amax(-1).clamp_min(eps) * (1.0 / E4M3_MAX)  # as the GEMM computes it
    q = (groups / scale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.view(r, ng * group)[:, :c].contiguous(), scale


def fake_quantize_activations(a: torch.Tensor, group: int = 128) -> torch.Tensor:
    """a through quantize_activations and back, in float32."""
    q, s = quantize_activations(a, group)
    return q.float() * s.repeat_interleave(group, -1)[:, :a.shape[1]]


def quantize_weights(w: dict, names, fmt: Fp8Format) -> dict:
    """A weights dict with the entries `names` (that it has) block-quantised, the rest as given."""
    return {k: quantize(v, fmt) if k in names else v for k, v in w.items()}


def dequantize_weights(w: dict) -> dict:
    """A weights dict with every Fp8Weight replaced by its float32 values."""
    return {k: v.dequantize() if isinstance(v, Fp8Weight) else v for k, v in w.items()}
