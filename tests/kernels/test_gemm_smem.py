"""GemmSpec.shared_memory, the estimate the microbenchmark skips knob sets by before compiling:
never above what Triton gives the kernel (the kernel compiled for an H100/H200 target on the CPU,
no GPU needed), and under an H200's limit for every committed pick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from deamoe.decode.knobs import make_tiles, parse_knobs
from deamoe.kernels.deamoe_decode import DEPT_UP, EXPERT_UP
from deamoe.kernels.fused_moe import W2, W13
from deamoe.kernels.grouped_gemm import ACTS, TileConfig
from deamoe.shapes import table1_row

H200_SHARED = 232448  # bytes per block (opt-in), what Triton checks a kernel against on an H200
POINTERS = {"a_ptr": "*bf16", "bg_ptr": "*bf16", "bu_ptr": "*bf16", "c_ptr": "*bf16",
            "sorted_ptr": "*i32", "block_group_ptr": "*i32", "nblocks_ptr": "*i32",
            "ids_ptr": "*i64", "w_ptr": "*fp32", "stride_be": "i64"}
ALIGNED = ("a_ptr", "bg_ptr", "bu_ptr", "c_ptr", "sorted_ptr", "block_group_ptr", "nblocks_ptr",
           "ids_ptr", "w_ptr", "N", "K", "stride_am", "stride_bn", "stride_cm")


SPECS = {"w2": W2, "w13": W13, "dept_up": DEPT_UP, "expert_up": EXPERT_UP}
CASES = [
    ("w2", "n64-k128-w4-s3", 16),          # mma.sync: A pipelined in num_stages - 1 copies
    ("w2", "n128-k128-w4-s3", 64),         # wgmma: one more copy
    ("w2", "n64-k64-w4-s4-tma", 128),      # TMA weights, pipelined like A
    ("w2", "n64-k64-w4-s3-tma-swap", 16),  # swapped: the weight tile is wgmma's M side
    ("w13", "n64-k256-w4-s3-tma", 16),     # SwiGLU: two weight tiles, a second A load
    ("dept_up", "n128-k128-w4-s3-tma", 64),  # both halves: two weight tiles
    ("expert_up", "n32-k256-w4-s3", 128),
    ("w2", "n64-k64-w4-s1", 16),           # no pipelining
]


def triton_shared_memory(cases) -> list[int]:
    """Triton's shared memory for the kernel of each (GEMM, tile, BLOCK_M), compiled for sm_90
    with the launch's constexprs and 16-byte alignment (as grouped_gemm launches it on bf16):
    in a process of its own, where Triton compiles instead of interpreting."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from deamoe.kernels import grouped_gemm as gg

    fn, out = gg.grouped_gemm_kernel, []
    for name, tile, block_m in cases:
        spec, t = SPECS[name], TileConfig.parse(tile)
        consts = dict(A_MODE=spec.a_mode, C_MODE=spec.c_mode, EPI=spec.epi, ACT=ACTS[spec.act],
                      WEIGHTED=spec.atomic, ATOMIC=spec.atomic, EVEN_K=True, DOT_F32=False,
                      BLOCK_M=block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, B_DESC=t.tma,
                      SWAP_AB=t.swap, N_FASTEST=t.nfast)
        desc = f"tensordesc<bf16[{t.block_n}, {t.block_k}]>"
        sig = {n: "constexpr" if n in consts else
               desc if t.tma and n in ("bg_ptr", "bu_ptr") else POINTERS.get(n, "i32")
               for n in fn.arg_names}
        aligned = [n for n in ALIGNED if not (t.tma and n in ("bg_ptr", "bu_ptr"))]
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        kernel = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": t.num_warps, "num_stages": t.num_stages})
        out.append(int(kernel.metadata.shared))
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1",
           "TRITON_CACHE_DIR": str(tmp_path_factory.mktemp("triton"))}
    r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                       timeout=600)
    if r.returncode:
        pytest.skip(f"cannot compile for sm_90 here: {r.stderr.strip().splitlines()[-1][:160]}")
    return dict(zip(CASES, json.loads(r.stdout.strip().splitlines()[-1])))


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_estimate_never_exceeds_what_triton_allocates(case, compiled):
    name, tile, block_m = case
    spec = SPECS[name].on(TileConfig.parse(tile))
    assert spec.shared_memory(block_m) <= compiled[case]
    if name == "w2" and (block_m >= 64 or spec.tile.swap) and spec.tile.tma:
        assert compiled[case] - spec.shared_memory(block_m) < 256  # it counts all there is


def test_a_tile_the_estimate_puts_over_the_limit_is_over_it():
    # DeaMoE's department up-projection on 128 x 128 TMA tiles in 3 stages at 64 rows: wgmma,
    # 3 copies of A (16 KiB) and of both weight halves (2 x 32 KiB) -- 240 KiB
    spec = DEPT_UP.on(TileConfig.parse("n128-k128-w4-s3-tma"))
    assert spec.shared_memory(64) == 245760 > H200_SHARED
    assert spec.shared_memory(16) == 2 * 128 * (16 + 2 * 128) * 2 < H200_SHARED


@pytest.mark.parametrize("table", ["microbench.csv", "microbench_shared.csv"])
def test_every_committed_pick_fits_an_h200_by_the_estimate(table):
    # the skip can never drop a committed pick from the search
    df = pd.read_csv(Path(__file__).resolve().parents[2] / "reports/measured/h200" / table)
    for r in df.itertuples():
        for kind in ("baseline", "deamoe"):
            knobs = getattr(r, f"{kind}_tile")
            if isinstance(knobs, str) and knobs != "failed":
                tiles = make_tiles(getattr(table1_row(r.model), kind), parse_knobs(knobs))
                assert tiles.shared_memory() <= H200_SHARED, (r.model, r.batch, kind)


if __name__ == "__main__":  # the compile, run by the `compiled` fixture in its own process
    print(json.dumps(triton_shared_memory(CASES)))
