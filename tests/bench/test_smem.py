"""`bench smem-check` on the CPU, the compiler stood in for: one row per (GEMM, tile, BLOCK_M),
written as each GEMM finishes, and exit status 1 where the estimate exceeds Triton's count (the
search would skip a knob set that compiles).  Against the real compiler: tests/kernels/
test_gemm_smem.py (sm_90 on the CPU) and the command itself on a GPU."""

from __future__ import annotations

import pandas as pd

from deamoe.bench import smem


def test_rows_and_the_verdict(tmp_path, monkeypatch, capsys):
    import deamoe.kernels.grouped_gemm as gg

    monkeypatch.setattr(gg, "shared_memory_limit", lambda device: 100_000)
    def triton_count(spec, block_m):  # the estimate plus the epilogue; one kernel below it
        low = spec.tile.name == "n64-k64-w4-s3" and block_m == 128 and spec.epi == gg.EPI_BOTH
        return spec.shared_memory(block_m) + (-1 if low else 4096)

    monkeypatch.setattr(smem, "compiled_shared_memory", triton_count)
    tiles = ["n64-k64-w4-s3", "n128-k128-w4-s3-tma"]
    assert smem.smem_check(tmp_path, tiles, ["w2", "dept_up"]) == 1
    df = pd.read_csv(tmp_path / "smem_check.csv")
    assert len(df) == 2 * 2 * 4 and sorted(set(df.block_m)) == [16, 32, 64, 128]
    bad = df[~df.ok]
    assert bad[["gemm", "tile", "block_m"]].values.tolist() == [["dept_up", "n64-k64-w4-s3", 128]]
    # the TMA tile in 3 stages at 128 rows: wgmma, 3 copies of 128 x 128 A and weight tiles
    row = df[(df.gemm == "w2") & (df.tile == tiles[1]) & (df.block_m == 128)].iloc[0]
    assert row.estimate == 3 * 128 * (128 + 128) * 2 and row.skipped and row.over_limit
    out = capsys.readouterr().out
    assert "estimate <= Triton's count at 15/16 kernels" in out
    assert smem.smem_check(tmp_path, tiles[:1], ["w2"]) == 0
