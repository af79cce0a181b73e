"""`bench smem-check`: the shared-memory estimate the search skips tile sets by, against Triton's.

For each weight precision (bf16, or block-scaled FP8 weights of microbench.fp8_block: fp8,
fp8-w8a8), each GEMM of both layers (their GemmSpecs), each tile (microbench.tiles, for FP8
microbench.fp8_tiles) and each BLOCK_M a grouping can take, the kernel is compiled for the device
(no launch: grouped_gemm's warmup) and Triton's own count of the shared memory it needs is put
beside GemmSpec.shared_memory, the estimate the microbenchmark skips knob sets by before
compiling them.  The estimate must never exceed Triton's count (else the search would skip a set
that compiles) -> OUT/smem_check.csv (a weight_dtype column), exit status 1 where it does.  CUDA
only.
"""

from __future__ import annotations

import time
from pathlib import Path

from deamoe.decode.knobs import GEMM_STAGES

GROUPS, WIDTH, TOKENS, TOP_K = 8, 512, 4, 2  # any sizes: the shared memory follows the tile
GEMMS = GEMM_STAGES["moe"] + GEMM_STAGES["deamoe"]


def gemm_specs() -> dict:
    """{GEMM name: its GemmSpec} of both layers."""
    from deamoe.kernels.deamoe_decode import DEPT_DOWN, DEPT_UP, EXPERT_DOWN, EXPERT_UP
    from deamoe.kernels.fused_moe import W2, W13

    return dict(zip(GEMMS, (W13, W2, DEPT_UP, EXPERT_UP, EXPERT_DOWN, DEPT_DOWN)))


def compiled_shared_memory(spec, block_m: int, fp8=None) -> int:
    """Triton's shared memory (bytes) for `spec` (its tile) at BLOCK_M rows, compiled for the
    current CUDA device on small bf16 operands (rows of every mode, the routing of TOKENS
    tokens over GROUPS groups); fp8 (an Fp8Format): the weights block-quantised in it
    (deamoe.kernels.fp8.quantize, as the decode path's weights are); an output stored for the
    next GEMM ('-qo', '-qs' tiles) in the buffer the layers give it."""
    import torch

    from deamoe.kernels.align import AlignSpec, align
    from deamoe.kernels.fp8 import quantize
    from deamoe.kernels.fp8_quant import gemm_output
    from deamoe.kernels.gemm_spec import EPI_ACT, EPI_BOTH, EPI_SWIGLU
    from deamoe.kernels.grouped_gemm import grouped_gemm

    dev, bf16 = "cuda", torch.bfloat16
    ids = torch.randint(0, GROUPS, (TOKENS, TOP_K), device=dev)
    al = align(ids, AlignSpec(n_groups=GROUPS, block_m=block_m))[0]
    rows = TOKENS * GROUPS  # enough for ROW_TOKEN, ROW_PAIR and ROW_TOKDEPT
    up_in = WIDTH if spec.epi == EPI_SWIGLU else 0
    up_out = WIDTH if spec.epi == EPI_BOTH else 0
    spec = spec.on(spec.tile, n_dept=GROUPS, per_group=1, a_up_off=up_in, c_up_off=up_out)
    a = torch.zeros(rows, WIDTH + up_in, device=dev, dtype=bf16)
    c = torch.zeros(rows, WIDTH + up_out, device=dev, dtype=bf16)

    def weight():
        w = torch.zeros(GROUPS, WIDTH, WIDTH, device=dev, dtype=bf16)
        return w if fp8 is None else quantize(w, fp8)

    bg, bu = weight(), None if spec.epi == EPI_ACT else weight()
    if not spec.atomic:
        c = gemm_output(rows, WIDTH + up_out, a, spec.tile, bg)
    kernel = grouped_gemm(a, bg, c, al, ids, spec, bu=bu,
                          weights=torch.ones(TOKENS, TOP_K, device=dev) if spec.atomic else None,
                          warmup=True)
    return int(kernel.metadata.shared)


def smem_check(out: Path, s, gemms: list[str]) -> int:
    """Every (weight precision of s.weight_dtype, GEMM, tile of that precision, BLOCK_M) ->
    out/smem_check.csv; s: the MicrobenchSettings whose search the estimate serves.  1 if the
    estimate exceeds Triton's count anywhere."""
    import pandas as pd

    from deamoe.bench.checks import stamped
    from deamoe.bench.search import BLOCK_M_KNOBS, on_stage
    from deamoe.io import write_csv
    from deamoe.kernels.gemm_spec import shared_memory_limit
    from deamoe.kernels.tile_config import TileConfig

    limit = shared_memory_limit("cuda")
    block_ms = sorted({m for knobs in BLOCK_M_KNOBS.values() for ms in knobs.values() for m in ms})
    rows, t0 = [], time.time()
    for precision in s.weight_dtype:
        fmt, names = s.fp8_format(precision), s.tiles_for(precision)
        for name in gemms:
            for tile in names:
                for block_m in block_ms:
                    spec = gemm_specs()[name].on(TileConfig.parse(on_stage(name, tile)))
                    estimate = spec.shared_memory(block_m, 2, fmt)
                    triton_bytes = compiled_shared_memory(spec, block_m, fmt)
                    rows.append({"weight_dtype": precision, "gemm": name, "tile": tile,
                                 "block_m": block_m, "estimate": estimate,
                                 "triton": triton_bytes, "limit": limit,
                                 "over_limit": triton_bytes > limit,
                                 "skipped": estimate > limit, "ok": estimate <= triton_bytes})
            write_csv(Path(out) / "smem_check.csv", stamped(rows))  # a cut call keeps it
            print(f"{precision} {name}: {len(names) * len(block_ms)} kernels compiled "
                  f"({time.time() - t0:.0f} s)", flush=True)
    df = pd.DataFrame(rows)
    over = df[df.over_limit]
    print(f"smem-check: estimate <= Triton's count at {int(df.ok.sum())}/{len(df)} kernels; "
          f"{len(over)} over the device's {limit} B, {int(over.skipped.sum())} of them skipped "
          "by the estimate before compiling")
    if not df.ok.all():
        print(df[~df.ok].to_string(index=False))
    return 0 if bool(df.ok.all()) else 1
