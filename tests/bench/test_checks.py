"""`bench fp8-check`'s and `bench picks-check`'s plumbing on the CPU (device="cpu"): Table 1's
layers stand in as small ones, so the interpreter runs their stream options and their (eager,
off CUDA) step replays; the rows carry their part, weights and tolerance, and the CSV is
written after each battery pass and each model; an FP8 table's picks are checked on FP8 weights."""

from __future__ import annotations

import types

import pandas as pd
import pytest

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.shapes import DeaMoEShape, MoEShape


# as small as the interpreter allows in time: the graph rows' 64-token steps cost one program per
# 16-row block (2 experts a token: 12 blocks); each matrix is one partial block of the 128 x 128
# FP8 scales, as the 128-wide layers' were one whole block
SMALL = types.SimpleNamespace(
    baseline=MoEShape(h=64, h_ffn=32, n_expert=4, k_expert=2),
    deamoe=DeaMoEShape(h=64, h_ffn=32, n_dept=2, n_expert=4, k_dept=1, k_expert=2,
                       expert_init="random"))


def test_fp8_check_rows_and_their_table(tmp_path, monkeypatch, capsys):
    import deamoe.kernels.battery as battery
    import deamoe.shapes as shapes
    from deamoe.bench.checks import fp8_check

    monkeypatch.setattr(shapes, "table1_row", lambda model: SMALL)
    monkeypatch.setattr(battery, "full_battery", lambda *a, **kw: [])  # its own test: test_fp8
    assert fp8_check(tmp_path, ("fp8",), ["DeepSeek-V3"], kernel=tmp_path / "none.py",
                     device="cpu") == 0
    df = pd.read_csv(tmp_path / "fp8_check.csv")
    assert df.groupby("part").size().to_dict() == {"graph": 8, "stream": 8}
    assert (df["weights"] == "fp8").all() and (df["tol"] == 1e-2).all() and df["ok"].all()
    # every row names where it was measured, like every measured table
    assert df[["gpu", "torch", "triton", "date", "git_sha"]].notna().all().all()
    out = capsys.readouterr().out
    assert "fp8 DeepSeek-V3: 16/16 ok so far" in out and "vLLM beside ours: not run" in out
    assert "fp8 check: 16/16 ok" in out


def test_fp8_check_stopped_mid_call_keeps_its_finished_passes(tmp_path, monkeypatch):
    # a GPU call stopped at its time limit (here: the second pass fails) leaves the first pass's
    # rows in the table, not nothing
    import deamoe.kernels.battery as battery
    import deamoe.shapes as shapes
    from deamoe.bench.checks import fp8_check

    def battery_pass(*a, **kw):
        if kw["w8a8_pass"]:
            raise TimeoutError("stopped")
        return [{"case": "moe-small", "rel_err": 0.05, "tol": 0.1, "ok": True}]

    monkeypatch.setattr(battery, "full_battery", battery_pass)
    monkeypatch.setattr(shapes, "table1_row", lambda model: SMALL)
    with pytest.raises(TimeoutError):
        fp8_check(tmp_path, ("fp8-w8a8",), ["DeepSeek-V3"], kernel=None, device="cpu")
    df = pd.read_csv(tmp_path / "fp8_check.csv")
    assert df["part"].tolist() == ["battery"] and df["ok"].all()


# the unchosen departments' rows of DeaMoE's department output are poisoned (NaN) and quantised
# too: the interpreter warns of their all-NaN max
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
def test_fp8_check_runs_w8a8_once_per_way_its_activations_meet_the_gemms(tmp_path, monkeypatch):
    # w8a8: the battery and the stream options five times, on the main loop's quantiser, on
    # '-pq' tiles, on '-qo' tiles, on '-qo' tiles of 64-column groups and on '-qs' tiles, each
    # where the layer can take them: with h_ffn 32 only the baseline takes '-pq' and '-qs' and
    # neither '-qo' (not whole 128- or 64-column groups); with h_ffn 128 both take all
    import deamoe.kernels.battery as battery
    import deamoe.shapes as shapes
    from deamoe.bench.checks import fp8_check

    calls = []
    monkeypatch.setattr(battery, "full_battery", lambda *a, **kw: calls.append(kw["w8a8_pass"]) or [])
    monkeypatch.setattr(shapes, "table1_row", lambda model: SMALL)
    assert fp8_check(tmp_path, ("fp8-w8a8",), ["DeepSeek-V3"], kernel=None, device="cpu") == 0
    df = pd.read_csv(tmp_path / "fp8_check.csv")
    assert df.groupby("part").size().to_dict() == {"graph": 8, "stream": 8, "stream-pq": 2,
                                                   "stream-qs": 2}
    assert calls == ["", "-pq", "-qo", "-qo-half", "-qs"] and df["ok"].all()
    assert set(df.loc[df["part"].isin(["stream-pq", "stream-qs"]), "kind"]) == {"moe"}

    wide = types.SimpleNamespace(
        baseline=MoEShape(h=64, h_ffn=128, n_expert=4, k_expert=2),
        deamoe=DeaMoEShape(h=64, h_ffn=128, n_dept=2, n_expert=4, k_dept=1, k_expert=2,
                           expert_init="random"))
    monkeypatch.setattr(shapes, "table1_row", lambda model: wide)
    monkeypatch.setattr("deamoe.bench.checks._graph_rows", lambda *a, **kw: [])
    assert fp8_check(tmp_path / "wide", ("fp8-w8a8",), ["DeepSeek-V3"], kernel=None,
                     device="cpu") == 0
    df = pd.read_csv(tmp_path / "wide" / "fp8_check.csv")
    per = df.groupby(["part", "kind"]).size().to_dict()
    assert per == {(p, k): n for p in ("stream", "stream-pq", "stream-qo", "stream-qo-half",
                                       "stream-qs")
                   for k, n in (("moe", 2), ("deamoe", 6))} and df["ok"].all()


def test_picks_check_runs_an_fp8_tables_picks_on_fp8_weights(tmp_path, monkeypatch, capsys):
    # the baseline's w8a8 pick with A quantised before its GEMMs ('-pq'), eagerly and as a
    # step replay, against the reference on the dequantised weights
    import deamoe.shapes as shapes
    from deamoe.bench.checks import picks_check

    monkeypatch.setattr(shapes, "table1_row", lambda model: SMALL)
    table = tmp_path / "microbench_fp8.csv"
    pd.DataFrame([{"model": "DeepSeek-V3", "batch": 5, "weight_dtype": "fp8-w8a8",
                   "baseline_tile": "w13=n32-k128-w4-s1-pq;w2=n32-k128-w4-s1-pq;block_m=16;"
                                    "split_launches=2",
                   "deamoe_tile": "dept_up=n32-k128-w4-s1;expert_up=n32-k128-w4-s1;"
                                  "expert_down=n32-k128-w4-s1;dept_down=n32-k128-w4-s1"}]).to_csv(
        table, index=False)
    assert picks_check(tmp_path, str(table), device="cpu") == 0
    df = pd.read_csv(tmp_path / "picks_check.csv")
    assert set(df["path"]) == {"eager", "graph"} and (df["kind"] == "baseline").all()
    assert (df["weights"].dropna() == "fp8-w8a8").all() and df["ok"].all()
    assert "DeepSeek-V3 baseline (fp8-w8a8): 1 picks checked" in capsys.readouterr().out
