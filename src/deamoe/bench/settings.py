"""The `microbench` section of the pipeline config (workflow/schemas/microbench.schema.yaml).

Light imports only, like the other sections' settings: the search and the tools take it, and
constructing it checks every value, naming the key.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from deamoe.errors import ConfigError, not_a_file
from deamoe.shapes import table1_row


@dataclass
class MicrobenchSettings:
    """The `microbench` section of the pipeline config (see workflow/schemas/microbench.schema.yaml)."""

    models: list[str] = field(default_factory=lambda: ["Baseline-7B", "DeepSeek-V3", "Qwen3-235B-A22B"])
    batches: list[int] = field(default_factory=lambda: [4, 8, 16, 24, 32, 40, 48, 64, 96, 128])
    tiles: list[str] = field(default_factory=lambda: [
        "n128-k128-w4-s3", "n64-k128-w4-s4", "n32-k256-w4-s3", "n128-k64-w8-s4", "n64-k64-w4-s3",
        "n32-k128-w4-s3",
        # TMA weight loads: 0-1.5% faster on the large GEMMs, up to 9% on the small ones
        "n128-k128-w4-s3-tma", "n64-k256-w4-s3-tma", "n64-k64-w4-s3-tma",
        # 256 columns: half the re-reads of the fp32 S rows by DeaMoE's dept_down at >= 64
        # tokens, where a 128-row A tile is twice the bytes of a 128-wide weight tile
        "n256-k64-w8-s3-tma",
        # swapped orientation: picked at every batch by the Baseline-7B baseline (1.5-4.7%
        # faster) and at some points by DeaMoE; in place of n128-k64-w4-s5 and n64-k256-w4-s3,
        # which no point picked
        "n64-k64-w4-s3-tma-swap", "n128-k64-w4-s3-tma-swap"])
    block_m: int = 16
    # timing: layer copies rotated past L2 inside CUDA graphs, a fresh routing per layer step
    rotate_bytes: float = 2.0e9
    max_copies: int = 16
    min_layers_per_graph: int = 8
    routing_draws: int = 50
    # the tile search: short trials, then its finalists and the pick re-timed in full
    select_replays: int = 10
    finalists: int = 3
    replays: int = 50
    # beside the timed layers: the library reference, the read roofline, the correctness battery
    torch_reference: bool = True
    roofline_gib: float = 4.0
    battery: bool = True
    battery_tokens: list[int] = field(default_factory=lambda: [1, 13, 64, 256])
    vllm_peer: bool = True  # vLLM's own kernel beside our baseline (deamoe.bench.vllm_peer)
    # the model-level decode step (Figure 3 at GPU scale)
    decode: bool = True
    decode_models: list[str] = field(default_factory=lambda: ["Baseline-7B"])
    # finer than `batches` at 64..96 and past 128: DeaMoE's batch under the baseline's TPOT there
    decode_batches: list[int] = field(default_factory=lambda: [
        4, 8, 16, 24, 32, 40, 48, 64, 72, 80, 88, 96, 128, 160, 192, 256])
    decode_layers: int = 24
    decode_heads: int = 16
    decode_context: int = 512
    decode_vocab: int = 32000
    decode_replays: int = 20
    # the search's passes after the tiles: coordinates, parallel chains, dense department GEMMs
    coordinate_search: bool = True
    split_launches: list[int] = field(default_factory=lambda: [1, 2, 4])
    dense_dept_up: list[bool] = field(default_factory=lambda: [False, True])
    dense_parts: bool = True  # with a dense pick split in n parts, try 1..n-1 of them dense
    pair_dept_down: bool = True  # the pick with dept_down over pair rows (search.py)
    dense_up_cublas: bool = True  # w8a8: a dense pick with its dense GEMM through cuBLAS too
    final_tile_pass: bool = True
    grid_order: bool = True
    # a microbench.csv whose picks join each point's finalists ("" = none), so a run cannot
    # lose a pick an earlier run found to a candidate that won its few-replay trials by noise
    prior_picks: list[str] | str = field(default_factory=list)  # one path or '' become a list
    stage_batches: list[int] = field(default_factory=lambda: [4, 16, 64, 128])
    seed: int = 0
    shared_stream: list[bool] = field(default_factory=lambda: [False, True])  # bench.shared
    # the weights' precisions measured (deamoe.kernels.fp8.PRECISIONS): bf16 -> microbench.csv;
    # fp8 (weight-only) and fp8-w8a8 (activations quantised per group) -> microbench_fp8.csv
    weight_dtype: list[str] = field(default_factory=lambda: ["bf16"])
    # FP8 weights' scale blocks (block_n, block_k): DeepSeek-V3's 128 x 128
    fp8_block: list[int] = field(default_factory=lambda: [128, 128])
    # the tiles the FP8 search tries (as `tiles`): BLOCK_K must divide fp8_block's block_k (and
    # equal it for fp8-w8a8); a 128-column FP8 tile moves the bytes of a 64-column bf16 one
    fp8_tiles: list[str] = field(default_factory=lambda: [
        "n128-k128-w4-s4", "n64-k128-w4-s4", "n32-k128-w4-s5", "n128-k128-w8-s4",
        "n64-k128-w4-s5-tma", "n128-k128-w4-s4-tma", "n256-k128-w8-s4-tma", "n32-k128-w4-s4-tma",
        "n64-k128-w4-s4-tma-swap", "n128-k128-w4-s4-tma-swap"])

    def fp8_format(self, precision: str):
        """The Fp8Format of one of weight_dtype's precisions (None for bf16)."""
        from deamoe.kernels.fp8 import Fp8Format

        return Fp8Format.of(precision, tuple(self.fp8_block))

    def tiles_for(self, precision: str) -> list[str]:
        """The tiles the search tries for weights of `precision`: fp8_tiles for FP8, else tiles;
        for weight-only FP8 without the '-pq', '-qo' and '-qs' ones (activations stay bf16 there)."""
        from deamoe.kernels.tile_config import TileConfig

        fmt = self.fp8_format(precision)
        if fmt is None:
            return self.tiles
        return [t for t in self.fp8_tiles if fmt.activations == "fp8"
                or not (TileConfig.parse(t).preq or TileConfig.parse(t).qout
                        or TileConfig.parse(t).qscale)]

    def searching(self, precision: str) -> MicrobenchSettings:
        """A copy whose `tiles` (what the search reads) are tiles_for(precision).  Not built
        through __post_init__: that refuses a '-pq' tile in `tiles`, which is right for a
        config's bf16 list but not for fp8_tiles, checked as such when these settings were made."""
        out = copy.copy(self)
        out.tiles = self.tiles_for(precision)
        return out

    def __post_init__(self):
        for m in self.models + self.decode_models:
            table1_row(m)
        check_tile_names(self.tiles, "microbench.tiles", bf16=True,
                         to_fp8="list it in microbench.fp8_tiles")
        if not self.tiles:
            raise ConfigError("microbench.tiles must name at least one tile config")
        if any(b < 1 for b in self.batches + self.battery_tokens):
            raise ConfigError("microbench.batches and battery_tokens must be >= 1")
        if any(not isinstance(v, int) or v < 1 for v in self.split_launches):
            raise ConfigError(f"microbench.split_launches: {self.split_launches!r}: "
                              "each value must be an integer >= 1")
        if not isinstance(self.min_layers_per_graph, int) or self.min_layers_per_graph < 1:
            raise ConfigError(f"microbench.min_layers_per_graph: {self.min_layers_per_graph!r}: "
                              "must be an integer >= 1")
        if not isinstance(self.routing_draws, int) or self.routing_draws < 1:
            raise ConfigError(f"microbench.routing_draws: {self.routing_draws!r}: "
                              "must be an integer >= 1")
        if not isinstance(self.finalists, int) or self.finalists < 1:
            raise ConfigError(f"microbench.finalists: {self.finalists!r}: must be an integer >= 1")
        if not isinstance(self.final_tile_pass, bool):
            raise ConfigError(f"microbench.final_tile_pass: {self.final_tile_pass!r}: "
                              "must be true or false")
        paths = [self.prior_picks] if isinstance(self.prior_picks, str) else self.prior_picks
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"microbench.prior_picks: {self.prior_picks!r}: must be a path, "
                              "a list of paths or ''")
        for path in paths:
            if path and not Path(path).is_file():
                raise ConfigError(f"microbench.prior_picks: {path!r}: {not_a_file(path)} "
                                  "(set '' to search without the previous picks)")
        self.prior_picks = [p for p in paths if p]  # one form for the search: a list of tables
        if not isinstance(self.vllm_peer, bool):
            raise ConfigError(f"microbench.vllm_peer: {self.vllm_peer!r}: must be true or false")
        if not isinstance(self.grid_order, bool):
            raise ConfigError(f"microbench.grid_order: {self.grid_order!r}: must be true or false")
        if not isinstance(self.pair_dept_down, bool):
            raise ConfigError(f"microbench.pair_dept_down: {self.pair_dept_down!r}: "
                              "must be true or false")
        if not isinstance(self.dense_up_cublas, bool):
            raise ConfigError(f"microbench.dense_up_cublas: {self.dense_up_cublas!r}: "
                              "must be true or false")
        if not isinstance(self.dense_parts, bool):
            raise ConfigError(f"microbench.dense_parts: {self.dense_parts!r}: "
                              "must be true or false")
        values = self.shared_stream
        if not isinstance(values, list) or not values or any(not isinstance(v, bool) for v in values):
            raise ConfigError(f"microbench.shared_stream: {values!r}: must list true and/or false")
        self._check_fp8()
        if any(not isinstance(v, bool) for v in self.dense_dept_up):
            raise ConfigError(f"microbench.dense_dept_up: {self.dense_dept_up!r}: "
                              "each value must be true or false")

    def _check_fp8(self) -> None:
        from deamoe.kernels.fp8 import PRECISIONS

        bad = [v for v in self.weight_dtype if v not in PRECISIONS] if isinstance(
            self.weight_dtype, list) else [self.weight_dtype]
        if bad or not self.weight_dtype or len(set(self.weight_dtype)) < len(self.weight_dtype):
            raise ConfigError(f"microbench.weight_dtype: {self.weight_dtype!r}: must list "
                              f"distinct values of {', '.join(PRECISIONS)}")
        if not isinstance(self.fp8_block, list) or len(self.fp8_block) != 2:
            raise ConfigError(f"microbench.fp8_block: {self.fp8_block!r}: [block_n, block_k]")
        try:
            fmts = [self.fp8_format(p) for p in ("fp8", "fp8-w8a8")]
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"microbench.fp8_block: {self.fp8_block!r}: {exc}") from None
        if not self.fp8_tiles:
            raise ConfigError("microbench.fp8_tiles must name at least one tile config")
        check_tile_names(self.fp8_tiles, "microbench.fp8_tiles", bf16=False,
                         fmts=[f for f in fmts if f.precision in self.weight_dtype])


def check_tile_names(names, where: str, bf16: bool, fmts=(), to_fp8: str = "") -> None:
    """A ConfigError naming `where` (a settings key, or the flag that gave the list) for the first
    of `names` that is no tile config, that bf16 weights cannot take where `bf16` ('-pq', '-qo',
    '-qs': `to_fp8` says where such a tile goes), or whose BLOCK_K does not fit a format of
    `fmts` (deamoe.kernels.fp8.Fp8Format)."""
    from deamoe.kernels.tile_config import TileConfig

    for t in names:
        try:
            tile = TileConfig.parse(t)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if bf16 and (tile.preq or tile.qout or tile.qscale):
            raise ConfigError(f"{where}: {t}: '-pq' / '-qo' / '-qs' (activations quantised before "
                              "the GEMM / by the one before / with its absmax) are for FP8 w8a8 "
                              f"weights: {to_fp8}")
        for fmt in fmts:
            if not fmt.fits_tile(tile):
                raise ConfigError(f"{where}: {t}: BLOCK_K {tile.block_k} does not fit "
                                  f"{fmt.precision} weights of {[fmt.block_n, fmt.block_k]} blocks "
                                  "(it must divide block_k; w8a8: equal it, or divide it on a "
                                  "'-pq' tile)")
