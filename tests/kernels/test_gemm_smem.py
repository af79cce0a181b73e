"""GemmSpec.shared_memory, the estimate the microbenchmark skips knob sets by before compiling:
never above what Triton gives the kernel and at most 1088 B below it (the kernel compiled for an
H100/H200 target on the CPU, no GPU needed, and the H200's own count in the committed smem-check
table), and under an H200's limit for every committed pick.  The same compile shows the
FP8 kernels' instructions: w8a8 runs Hopper's FP8 wgmma (e4m3 x e4m3) wherever the MMA's M side
is >= 64, weight-only widens e4m3 to bf16 for a bf16 MMA (the local Triton, which may be newer
than the H200's 3.6: the GPU check is `bench fp8-check`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from deamoe.decode.knobs import make_tiles, parse_knobs
from deamoe.bench.smem import gemm_specs
from deamoe.kernels.deamoe_decode import DEPT_DOWN_PAIRS, DEPT_UP, EXPERT_DOWN_RAW
from deamoe.kernels.fp8 import Fp8Format
from deamoe.kernels.gemm_spec import ACTS
from deamoe.kernels.tile_config import TileConfig
from deamoe.shapes import table1_row

H200_SHARED = 232448  # bytes per block (opt-in), what Triton checks a kernel against on an H200
POINTERS = {"a_ptr": "*bf16", "bg_ptr": "*bf16", "bu_ptr": "*bf16", "c_ptr": "*bf16",
            "sorted_ptr": "*i32", "block_group_ptr": "*i32", "nblocks_ptr": "*i32",
            "ids_ptr": "*i64", "w_ptr": "*fp32", "stride_be": "i64", "sg_ptr": "*fp32",
            "su_ptr": "*fp32", "as_ptr": "*fp32", "cs_ptr": "*fp32", "stride_se": "i64"}
# what a launch on real weights has divisible by 16; among them stride_be (a group's N * K) and
# the up offsets (0 or the width): without them Triton cannot pipeline the weight or up-input
# loads and counts far less shared memory than a launch does (`bench smem-check` on the H200)
ALIGNED = ("a_ptr", "bg_ptr", "bu_ptr", "c_ptr", "sorted_ptr", "block_group_ptr", "nblocks_ptr",
           "ids_ptr", "w_ptr", "sg_ptr", "su_ptr", "N", "K", "stride_am", "stride_be", "stride_bn",
           "stride_cm", "a_up_off", "c_up_off")


# {GEMM name: GemmSpec} of both layers, and DeaMoE's two GEMMs of pair rows (pair_dept_down):
# expert_down storing each pair's weighted rows, dept_down summing pair rows into out
SPECS = {**gemm_specs(), "expert_down_pairs": EXPERT_DOWN_RAW, "dept_down_pairs": DEPT_DOWN_PAIRS}
WEIGHTED = {"w2", "expert_down", "expert_down_pairs"}  # the launches given routing weights
CASES = [
    ("w2", "n64-k128-w4-s3", 16),          # mma.sync: A pipelined in num_stages - 1 copies
    ("w2", "n128-k128-w4-s3", 64),         # wgmma: one more copy
    ("w2", "n64-k64-w4-s4-tma", 128),      # TMA weights, pipelined like A
    ("w2", "n64-k64-w4-s3-tma-swap", 16),  # swapped: the weight tile is wgmma's M side
    ("w13", "n64-k256-w4-s3-tma", 16),     # SwiGLU: two weight tiles, a second A load
    ("dept_up", "n128-k128-w4-s3-tma", 64),  # both halves: two weight tiles
    ("expert_up", "n32-k256-w4-s3", 128),
    ("w2", "n64-k64-w4-s1", 16),           # no pipelining
    # FP8 weights (128 x 128 blocks): weight-only, and w8a8 on wgmma's M side >= 64 or not
    ("w2", "n128-k128-w4-s4", 64, "fp8"),
    ("w2", "n128-k128-w4-s4", 64, "fp8-w8a8"),
    ("w13", "n64-k128-w4-s4-tma-swap", 16, "fp8-w8a8"),
    ("w13", "n128-k128-w4-s4-tma", 16, "fp8-w8a8"),
    ("dept_up", "n64-k128-w4-s4-tma-swap", 16, "fp8"),
    ("w13", "n128-k128-w4-s4", 64, "fp8"),            # wgmma's B widened to bf16
    ("expert_down", "n32-k128-w4-s5", 32, "fp8-w8a8"),  # mma.sync: the quantised A bf16-wide
    # w8a8 with A quantised before the launch (preq): every tile e4m3, bf16's rule at 1 byte
    ("w13", "n128-k128-w4-s3-pq", 16, "fp8-w8a8"),
    ("w2", "n128-k128-w4-s4-tma-pq", 64, "fp8-w8a8"),
    ("dept_up", "n64-k128-w4-s6-tma-swap-pq", 16, "fp8-w8a8"),
    # ... and the up-projections' output quantised in the epilogue (qout): e4m3 C and its scales
    ("dept_up", "n128-k128-w4-s5-tma-swap-pq-qo", 16, "fp8-w8a8"),
    ("expert_up", "n128-k128-w4-s4-pq-qo", 64, "fp8-w8a8"),
    # ... in 64-column groups on n64 tiles, read on K steps of 64 (A_GROUP 64; 128-deep weight
    # scale blocks): the writers, the readers with and without wgmma
    ("dept_up", "n64-k128-w4-s6-tma-swap-pq-qo", 16, "fp8-w8a8"),
    ("dept_up", "n64-k128-w4-s4-pq-qo", 64, "fp8-w8a8"),
    ("expert_up", "n64-k64-w4-s8-pq-qo", 16, "fp8-w8a8"),
    ("expert_up", "n64-k64-w4-s8-tma-swap-pq-qo", 16, "fp8-w8a8"),
    ("expert_down", "n128-k64-w4-s8-tma-swap-pq", 16, "fp8-w8a8"),
    ("w2", "n64-k64-w4-s6-pq", 64, "fp8-w8a8"),
    # pair_dept_down: expert_down's weighted pair rows stored quantised (Qwen3 @4's pick '+qo'),
    # and dept_down reading them as it reads a '-pq' A
    ("expert_down_pairs", "n128-k128-w4-s4-tma-swap-pq-qo-nf", 16, "fp8-w8a8"),
    ("dept_down_pairs", "n128-k128-w4-s5-tma-swap-pq", 16, "fp8-w8a8"),
    # '-qs': the up-projections store their output as it is and gather its absmax per row and
    # 128-column group (atomic max): n64 tiles inside one group, n256 over two, a TMA-swapped
    # writer; and the GEMMs reading it ("a-absmax"): bf16 A quantised in the main loop with the
    # stored absmax (the main loop's quantiser's shared memory, whatever the tile's '-pq')
    ("w13", "n64-k128-w4-s5-tma-swap-pq-qs", 16, "fp8-w8a8"),
    ("dept_up", "n64-k128-w4-s6-tma-swap-pq-qs", 16, "fp8-w8a8"),
    ("dept_up", "n256-k128-w8-s3-pq-qs", 64, "fp8-w8a8"),
    ("expert_up", "n64-k128-w4-s4-pq-qs", 16, "fp8-w8a8", "a-absmax"),
    ("expert_up", "n128-k128-w4-s3-tma-swap-pq-qs", 64, "fp8-w8a8", "a-absmax"),
    ("expert_down", "n64-k128-w4-s4-pq", 16, "fp8-w8a8", "a-absmax"),
    ("expert_down", "n128-k128-w4-s5-tma-swap-pq", 16, "fp8-w8a8", "a-absmax"),
    ("w2", "n128-k128-w4-s4", 64, "fp8-w8a8", "a-absmax"),
    ("w2", "n64-k64-w4-s6-pq", 16, "fp8-w8a8", "a-absmax"),
]


def triton_shared_memory(cases) -> list[dict]:
    """Triton's shared memory and MMA instructions for the kernel of each (GEMM, tile, BLOCK_M[,
    precision]), compiled for sm_90 with the launch's constexprs and 16-byte alignment (as
    grouped_gemm launches it on bf16 or FP8 weights): in a process of its own, where Triton
    compiles instead of interpreting."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from deamoe.kernels import grouped_gemm as gg

    fn, out = gg.grouped_gemm_kernel, []
    for name, tile, block_m, *precision in cases:
        spec, t = SPECS[name], TileConfig.parse(tile)
        fp8 = precision[:1] in (["fp8"], ["fp8-w8a8"])
        absmax_a, precision = precision[1:] == ["a-absmax"], precision[:1]
        consts = dict(A_MODE=spec.a_mode, C_MODE=spec.c_mode, EPI=spec.epi, ACT=ACTS[spec.act],
                      WEIGHTED=name in WEIGHTED, ATOMIC=spec.atomic, EVEN_K=True, DOT_F32=False,
                      BLOCK_M=block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, B_DESC=t.tma,
                      SWAP_AB=t.swap, N_FASTEST=t.nfast, W_FP8=fp8,
                      A_FP8=precision == ["fp8-w8a8"], GROUP_N=128 if fp8 else 1,
                      GROUP_K=128 if fp8 else 1,
                      A_PREQ=t.preq and precision == ["fp8-w8a8"] and not absmax_a,
                      C_FP8=t.qout, C_FROM_BF16=t.qout, A_ABSMAX=absmax_a, C_ABSMAX=t.qscale,
                      C_GROUP=128 if t.qscale else 1)
        # A's groups: 128 columns from a '-pq' launch; a k64 reader here reads a '-qo' n64 output
        # (a '-qs' output: 128-column groups, read on K steps of 128 or 64)
        consts["A_GROUP"] = (128 if absmax_a else min(t.block_k, 128) if consts["A_PREQ"]
                             else 1)
        wdt = "fp8e4nv" if fp8 else "bf16"
        desc = f"tensordesc<{wdt}[{t.block_n}, {t.block_k}]>"
        sig = {n: "constexpr" if n in consts else
               "*fp8e4nv" if (n == "a_ptr" and consts["A_PREQ"]) or (n == "c_ptr" and t.qout) else
               desc if t.tma and n in ("bg_ptr", "bu_ptr") else
               f"*{wdt}" if n in ("bg_ptr", "bu_ptr") else POINTERS.get(n, "i32")
               for n in fn.arg_names}
        aligned = [n for n in ALIGNED if not (t.tma and n in ("bg_ptr", "bu_ptr"))]
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        kernel = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": t.num_warps, "num_stages": t.num_stages})
        mma = sorted(set(re.findall(r"(wgmma\.mma_async\S*|mma\.sync\S*)", kernel.asm["ptx"])))
        out.append({"shared": int(kernel.metadata.shared), "mma": mma})
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1",
           "TRITON_CACHE_DIR": str(tmp_path_factory.mktemp("triton"))}
    r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                       timeout=600)
    if r.returncode:
        # the kernel failing to compile is a bug in it (which Triton's interpreter would not
        # catch); only a Triton without the sm_90 backend is a reason to skip
        assert "CompilationError" not in r.stderr, r.stderr[-3000:]
        pytest.skip(f"cannot compile for sm_90 here: {r.stderr.strip().splitlines()[-1][:160]}")
    return dict(zip(CASES, json.loads(r.stdout.strip().splitlines()[-1])))


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_estimate_never_exceeds_what_triton_allocates(case, compiled):
    name, tile, block_m, *precision = case
    spec = SPECS[name].on(TileConfig.parse(tile))
    fp8 = Fp8Format.of(precision[0]) if precision else None
    shared = compiled[case]["shared"]
    estimate = spec.shared_memory(block_m, 2, fp8, precision[1:] == ["a-absmax"])
    assert estimate <= shared  # never skips a set that compiles
    if spec.tile.num_stages > 1:  # it counts all there is but barriers and the epilogue's scratch
        assert shared - estimate <= 1088


@pytest.mark.parametrize("case", [c for c in CASES if len(c) >= 4],
                         ids=["-".join(map(str, c)) for c in CASES if len(c) >= 4])
def test_fp8_kernels_use_the_fp8_tensor_cores_where_hopper_has_them(case, compiled):
    name, tile, block_m, precision, *_ = case
    t = TileConfig.parse(tile)
    wgmma = (t.block_n if t.swap else block_m) >= 64
    mma = compiled[case]["mma"]
    assert len(mma) == 1, mma
    if precision == "fp8":  # weight-only: e4m3 widened to bf16 in registers, a bf16 MMA
        assert mma[0].endswith("bf16.bf16" if wgmma else "bf16.bf16.f32"), mma
    elif wgmma:  # w8a8: FP8 operands on wgmma
        assert mma[0].startswith("wgmma") and mma[0].endswith(".e4m3.e4m3"), mma
    else:  # mma.sync has no FP8 on sm_90: Triton widens both operands to f16 (exact)
        assert mma[0].startswith("mma.sync") and ".f16.f16" in mma[0], mma


def test_a_tile_the_estimate_puts_over_the_limit_is_over_it():
    # DeaMoE's department up-projection on 128 x 128 TMA tiles in 3 stages at 64 rows: wgmma,
    # 3 copies of A (16 KiB) and of both weight halves (2 x 32 KiB) -- 240 KiB
    spec = DEPT_UP.on(TileConfig.parse("n128-k128-w4-s3-tma"))
    assert spec.shared_memory(64) == 245760 > H200_SHARED
    assert spec.shared_memory(16) == 2 * 128 * (16 + 2 * 128) * 2 < H200_SHARED


def test_the_fp8_estimate_against_the_h200s_own_count():
    # bench smem-check on the H200 (Triton 3.6): every w8a8 GEMM x FP8 tile x BLOCK_M compiled
    # for real; the estimate is computed anew here, the table's own column is the one of its day
    df = pd.read_csv(Path(__file__).resolve().parents[2] / "reports/measured/h200/checks/smem_check.csv")
    rows = df[df.weight_dtype == "fp8-w8a8"]
    assert len(rows) == 240
    for r in rows.itertuples():
        estimate = SPECS[r.gemm].on(TileConfig.parse(r.tile)).shared_memory(
            r.block_m, 2, Fp8Format.of(r.weight_dtype))
        assert estimate <= r.triton, r  # never skips a set that compiles
        assert r.triton - estimate <= 1088, r  # tight: barriers and the epilogue's scratch
        assert (estimate > r.limit) == r.over_limit, r  # skips every set that cannot compile


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
