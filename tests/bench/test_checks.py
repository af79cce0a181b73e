"""`bench fp8-check`'s plumbing on the CPU (deamoe.bench.checks.fp8_check with device="cpu"):
Table 1's layers stand in as small ones, so the interpreter runs its stream options and its
(eager, off CUDA) step replays; the rows carry their part, weights and tolerance, and the CSV
is written after each precision."""

from __future__ import annotations

import types

import pandas as pd

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.shapes import DeaMoEShape, MoEShape


def test_fp8_check_rows_and_their_table(tmp_path, monkeypatch, capsys):
    import deamoe.kernels.battery as battery
    import deamoe.shapes as shapes
    from deamoe.bench.checks import fp8_check

    # as small as the interpreter allows in time: the graph rows' 64-token steps cost one
    # program per 16-row block (2 experts a token: 12 blocks); each matrix is one partial
    # block of the 128 x 128 FP8 scales, as the 128-wide layers' were one whole block
    small = types.SimpleNamespace(
        baseline=MoEShape(h=64, h_ffn=32, n_expert=4, k_expert=2),
        deamoe=DeaMoEShape(h=64, h_ffn=32, n_dept=2, n_expert=4, k_dept=1, k_expert=2,
                           expert_init="random"))
    monkeypatch.setattr(shapes, "table1_row", lambda model: small)
    monkeypatch.setattr(battery, "full_battery", lambda *a, **kw: [])  # its own test: test_fp8
    assert fp8_check(tmp_path, ("fp8",), ["DeepSeek-V3"], kernel=tmp_path / "none.py",
                     device="cpu") == 0
    df = pd.read_csv(tmp_path / "fp8_check.csv")
    assert df.groupby("part").size().to_dict() == {"graph": 8, "stream": 8}
    assert (df["weights"] == "fp8").all() and (df["tol"] == 1e-2).all() and df["ok"].all()
    out = capsys.readouterr().out
    assert "fp8: 16/16 ok so far" in out and "vLLM beside ours: not run" in out
    assert "fp8 check: 16/16 ok" in out
