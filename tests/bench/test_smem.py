"""`bench smem-check` on the CPU, the compiler stood in for: one row per (weight precision, GEMM,
tile, BLOCK_M), written as each GEMM finishes, FP8 rows against the FP8 estimate, and exit
status 1 where the estimate exceeds Triton's count (the search would skip a knob set that
compiles).  Against the real compiler: tests/kernels/
test_gemm_smem.py (sm_90 on the CPU) and the command itself on a GPU."""

from __future__ import annotations

import pandas as pd

from deamoe.bench import smem
from deamoe.bench.settings import MicrobenchSettings


def test_rows_and_the_verdict(tmp_path, monkeypatch, capsys):
    import deamoe.kernels.gemm_spec as gs
    from deamoe.kernels.fp8 import Fp8Format

    monkeypatch.setattr(gs, "shared_memory_limit", lambda device: 100_000)
    seen = []

    def triton_count(spec, block_m, fp8=None):  # the estimate plus the epilogue; one kernel below
        seen.append(fp8)
        low = spec.tile.name == "n64-k64-w4-s3" and block_m == 128 and spec.epi == gs.EPI_BOTH
        return spec.shared_memory(block_m, 2, fp8) + (-1 if low else 4096)

    monkeypatch.setattr(smem, "compiled_shared_memory", triton_count)
    tiles = ["n64-k64-w4-s3", "n128-k128-w4-s3-tma"]
    s = MicrobenchSettings(weight_dtype=["bf16", "fp8-w8a8"], tiles=tiles, fp8_tiles=tiles[1:])
    assert smem.smem_check(tmp_path, s, ["w2", "dept_up"]) == 1
    df = pd.read_csv(tmp_path / "smem_check.csv")
    assert len(df) == 2 * 2 * 4 + 2 * 4 and sorted(set(df.block_m)) == [16, 32, 64, 128]
    assert df.weight_dtype.value_counts().to_dict() == {"bf16": 16, "fp8-w8a8": 8}
    assert seen == [None] * 16 + [Fp8Format(128, 128, "fp8")] * 8  # the microbench's blocks
    bad = df[~df.ok]
    assert bad[["weight_dtype", "gemm", "tile", "block_m"]].values.tolist() == [
        ["bf16", "dept_up", "n64-k64-w4-s3", 128]]
    # the TMA tile in 3 stages at 128 rows: wgmma, 3 copies of 128 x 128 A and weight tiles;
    # w8a8 keeps 2 bf16 A tiles, the quantised e4m3 one and 3 e4m3 weight tiles
    at = (df.gemm == "w2") & (df.tile == tiles[1]) & (df.block_m == 128)
    row = df[at & (df.weight_dtype == "bf16")].iloc[0]
    assert row.estimate == 3 * 128 * (128 + 128) * 2 and row.skipped and row.over_limit
    row = df[at & (df.weight_dtype == "fp8-w8a8")].iloc[0]
    assert row.estimate == 128 * (2 * 2 * 128 + 128 + 3 * 128) and row.skipped and row.ok
    out = capsys.readouterr().out
    assert "estimate <= Triton's count at 23/24 kernels" in out
    assert "fp8-w8a8 dept_up: 4 kernels compiled" in out
    s = MicrobenchSettings(weight_dtype=["fp8"], fp8_tiles=tiles[1:])
    assert smem.smem_check(tmp_path, s, ["w2"]) == 0
    assert set(pd.read_csv(tmp_path / "smem_check.csv").weight_dtype) == {"fp8"}


def test_the_command_gives_each_precision_its_tiles(tmp_path, monkeypatch, capsys):
    from deamoe.commands import bench as cli
    from deamoe.cli import main

    calls = []
    monkeypatch.setattr(cli, "_needs_cuda", lambda what: None)
    monkeypatch.setattr(smem, "smem_check", lambda out, s, gemms: calls.append(
        {p: s.tiles_for(p) for p in s.weight_dtype}) or 0)
    assert main(["bench", "smem-check", str(tmp_path)]) == 0
    assert main(["bench", "smem-check", str(tmp_path), "--weight-dtype", "bf16,fp8-w8a8"]) == 0
    assert main(["bench", "smem-check", str(tmp_path), "--weight-dtype", "fp8",
                 "--tiles", "n64-k64-w4-s3"]) == 0
    s = MicrobenchSettings()
    assert calls == [{"bf16": s.tiles}, {"bf16": s.tiles, "fp8-w8a8": s.fp8_tiles},
                     {"fp8": ["n64-k64-w4-s3"]}]
    # a tile FP8 weights cannot take (w8a8: BLOCK_K = the scale block's 128), before the GPU
    assert main(["bench", "smem-check", str(tmp_path), "--weight-dtype", "fp8-w8a8",
                 "--tiles", "n64-k64-w4-s3"]) == 2
    assert "does not fit fp8-w8a8 weights" in capsys.readouterr().err
