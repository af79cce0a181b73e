"""The tile of one grouped-GEMM launch (deamoe.kernels.grouped_gemm): the knobs the
microbenchmark's search picks per GEMM, and their names ('n64-k128-w4-s4-tma', ...) as the
tables and settings write them."""

from __future__ import annotations

from dataclasses import dataclass

# the counts of a tile name, by the letter before each ('n64-k128-w4-s4')
COUNT_FIELDS = {"n": "block_n", "k": "block_k", "w": "num_warps", "s": "num_stages"}


@dataclass(frozen=True)
class TileConfig:
    """Tile of one GEMM: BLOCK_N, BLOCK_K, warps, pipeline stages; tma loads the weight tiles
    with the Hopper tensor-memory accelerator (one bulk copy per tile) instead of per-thread
    16-byte copies (0-1.5% faster on large GEMMs, up to 9% on Baseline-7B's small department
    GEMMs).  No split-K option: it was slower at every point (more atomics, shorter K loops)."""

    block_n: int = 64
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 4
    tma: bool = False
    # swap: compute C^T = B @ A^T, so the weight tile's BLOCK_N rows are the MMA's M side and the
    # BLOCK_M token rows its N side (Hopper's wgmma needs M >= 64 per warp group; 16-row token
    # blocks get the older mma.sync in the plain orientation).  Measured: no help for the big
    # department GEMMs, 1.5-4.7% faster for Baseline-7B's baseline experts (K = 1024)
    swap: bool = False
    # nfast: the grid's program order with the N tile fastest (one M block's N tiles side by
    # side, i.e. one expert's whole weight matrix streamed by neighbouring programs) instead of
    # the M block fastest (the same N tile of every expert side by side): with many small
    # experts the M-fastest order touches each expert's matrix once per N column, far apart
    nfast: bool = False
    # preq: with block-scaled FP8 weights and w8a8 activations, A quantised per row and group in
    # a launch before the GEMM (as vLLM's block path), the main loop then loading e4m3 A and its
    # scales, instead of quantising each A tile in the main loop (once per N tile); the same
    # numbers either way.  No effect on bf16 or weight-only FP8 launches
    preq: bool = False
    # qout: with w8a8 FP8 weights, this GEMM stores its output quantised per row and group in
    # its epilogue, and the next GEMM loads it as a '-pq' tile's A without the launch that
    # would quantise it; only where the output is stored, not summed (the up-projections), and
    # the same numbers as quantising the stored output.  A group is the tile's BLOCK_N columns,
    # which must divide the weights' block_k: n128 makes vLLM's 128-column groups, n64 finer
    # ones (so a 64-column tile needs no quantiser launch after it), read on K steps of <= 64
    qout: bool = False
    # qscale: with w8a8 FP8 weights, this GEMM stores its output as it is (the activations'
    # dtype) and its epilogue also gathers each row's max |value| per group of the weights'
    # block_k columns (atomic max into a float32 buffer, so any BLOCK_N: a power of two divides
    # the group or is a multiple of it); the next GEMM quantises its A tile in registers with
    # that scale: no quantiser launch between them, no reduction in the reader, K steps of one
    # group as on '-pq'.  The same numbers as quantising the stored output in a launch.  Only
    # where the output is stored, not summed (the up-projections); not with qout
    qscale: bool = False

    def __post_init__(self):
        # what a launch needs of the counts (tl.arange: powers of two; tl.dot: 16 a side), so a
        # tile no launch can take is refused where it is named, before any GPU work
        for field, least in (("block_n", 16), ("block_k", 16), ("num_warps", 1)):
            v = getattr(self, field)
            if not isinstance(v, int) or v < least or v & (v - 1):
                raise ValueError(f"tile {self.name}: {field} {v!r} must be a power of two "
                                 f">= {least}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"tile {self.name}: num_stages {self.num_stages!r} must be >= 1")

    @property
    def name(self) -> str:
        text = f"n{self.block_n}-k{self.block_k}-w{self.num_warps}-s{self.num_stages}"
        return (text + ("-tma" if self.tma else "") + ("-swap" if self.swap else "")
                + ("-pq" if self.preq else "") + ("-qo" if self.qout else "")
                + ("-qs" if self.qscale else "") + ("-nf" if self.nfast else ""))

    @classmethod
    def parse(cls, text: str) -> "TileConfig":
        """'n64-k128-w4-s4' -> TileConfig(64, 128, 4, 4); '-tma' appended: TMA weight loads;
        '-swap' appended (after -tma if both): the swapped orientation; '-pq' next: A quantised
        before the GEMM (w8a8); '-qo' next: the output stored quantised (w8a8), or '-qs' in its
        place: the output stored with its absmax per row and group (w8a8); '-nf' last: N tiles
        fastest in the grid."""
        try:
            words = text.split("-")
            flags = [w for w in words[4:]]
            nfast = flags[-1:] == ["nf"]
            if nfast:
                flags = flags[:-1]
            qscale = flags[-1:] == ["qs"]
            if qscale:
                flags = flags[:-1]
            qout = flags[-1:] == ["qo"]
            if qout:
                flags = flags[:-1]
            preq = flags[-1:] == ["pq"]
            if preq:
                flags = flags[:-1]
            if flags not in ([], ["tma"], ["swap"], ["tma", "swap"]):
                raise KeyError
            parts = {p[0]: int(p[1:]) for p in words[:4]}
            if set(parts) != set(COUNT_FIELDS) or (qout and qscale):
                raise KeyError
        except (KeyError, ValueError, IndexError):
            raise ValueError(f"tile config {text!r} is not of the form n64-k128-w4-s4 "
                             "(optionally with -tma, -swap or -tma-swap, then -pq, -qo, -nf; "
                             "-qs in -qo's place)") from None
        return cls(**{COUNT_FIELDS[c]: v for c, v in parts.items()}, tma="tma" in flags,
                   swap="swap" in flags, nfast=nfast, preq=preq, qout=qout, qscale=qscale)


BLOCK_M_VALUES = (16, 32, 64, 128, 256)  # rows per padded block: a power of two (tl.arange), >= 16 (tl.dot)
MAX_SPLIT = 64  # streams one layer's groups are split over


def check_layer_knobs(tiles) -> None:
    """A ValueError naming the knob where a layer's tiles (MoETiles, DeaMoETiles) hold a count no
    launch can take: a BLOCK_M outside BLOCK_M_VALUES (dense_block_m: 0 too, meaning
    dept_block_m), a split_launches outside 1..MAX_SPLIT, a dense_parts outside
    0..split_launches.  Said when the tiles are made, before any kernel runs."""
    for knob in ("block_m", "dept_block_m", "expert_block_m", "dense_block_m"):
        value = getattr(tiles, knob, None)
        allowed = BLOCK_M_VALUES + ((0,) if knob == "dense_block_m" else ())
        if value is not None and (isinstance(value, bool) or value not in allowed):
            raise ValueError(f"{knob} is {value!r}, not one of {', '.join(map(str, allowed))}")
    parts = tiles.split_launches
    if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= MAX_SPLIT:
        raise ValueError(f"split_launches is {parts!r}, not a whole number in 1..{MAX_SPLIT}")
    dense = getattr(tiles, "dense_parts", 0)
    if isinstance(dense, bool) or not isinstance(dense, int) or not 0 <= dense <= parts:
        raise ValueError(f"dense_parts is {dense!r}, not a whole number in 0..split_launches ({parts})")
