"""bench train on the CPU at small shapes: every section yields its rows with sane figures."""

from __future__ import annotations

from deamoe.bench.train_bench import layer_rows, step_rows
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.train import parallel
from deamoe.train.settings import load_settings


def _raise(what, exc):
    raise exc


def test_layer_rows_time_every_path():
    rows = []
    shapes = [("small", MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2)),
              ("small", DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=4))]
    layer_rows(shapes, 128, ["torch", "fast"], rows.append, _raise)
    assert [(r["ffn"], r["path"]) for r in rows] == [
        (f, p) for f in ("moe", "deamoe") for p in ("dense", "grouped_mm", "torch", "fast")]
    assert all(r["ms"] > 0 and r["tokens"] == 128 for r in rows)
    assert all(r["vs_dense"] == 1.0 for r in rows if r["path"] == "dense")


def test_step_rows_split_the_step_into_stages():
    settings = load_settings(doc={"train": {"seq_len": 16, "batch_size": 4, "micro_batch_size": 2, "threads": 1}})
    rows = []
    step_rows(settings, ["pretrain-tiny-deamoe-s0"], ["torch", "fast"], "step", 2, parallel.setup("cpu"), rows.append, _raise)
    assert [r["path"] for r in rows] == ["torch", "fast"]
    for r in rows:
        assert r["tokens"] == 64 and r["tokens_per_s"] > 0 and r["mfu"] is None
        assert r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["optimizer_ms"] > 0
