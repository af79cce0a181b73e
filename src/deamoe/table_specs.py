"""The specs (deamoe.readers.TableSpec) of the CSV tables the stages write and the report reads,
and of the committed measurements under reports/measured/<gpu>/, by file name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from deamoe.paper import TABLE4
from deamoe.readers import TableSpec
from deamoe.shapes import ALL_MODEL_NAMES, MODELS

POINT = ("model", "batch", "weight_dtype")  # a measured layer's point (weight_dtype: FP8 tables)
# a kernel table's times, bytes and read roofline beside the two it must hold (empty where not
# measured): the report divides by them
_KERNEL_MORE = ("baseline_bytes", "deamoe_bytes", "peak_read_tbps", "torch_grouped_us", "vllm_h200_us",
                "baseline_from_logits_us")
_KERNEL = TableSpec(("model", "batch", "baseline_us", "deamoe_us"), numbers=_KERNEL_MORE,
                    finite=("batch", "baseline_us", "deamoe_us"),
                    positive=("batch", "baseline_us", "deamoe_us") + _KERNEL_MORE, provenance=("date", "git_sha"),
                    key=POINT, rows=True, whole=("batch",))
# Table 1's search beside the paper's configuration, Figure 2's FP8 bytes: what the report reads
# of each once its first column is there
# a configuration's shape, shown beside the ratios where present (a count: no fraction; n_shared may be 0)
_TABLE1_SHAPE = ("h", "h_ffn", "n_expert", "k_expert", "n_shared", "n_dept", "dea_n_expert", "k_dept", "dea_k_expert")
_TABLE1_SEARCH = ("searched_n_expert", "searched_n_dept", "searched_k_dept", "searched_k_expert",
                  "paper_config_small_batch_loading", "searched_small_batch_loading", "search_objective",
                  "search_tolerance")
_LOADING_FP8 = ("ratio_fp8", "baseline_bytes_fp8", "baseline_bytes")
# The tables the stages write and the report reads, and the committed measurements under reports/measured/<gpu>/,
# by file name ("folder/name" where two differ): what `bench import` and `microbench --merge-decode-into` check
# before replacing a committed one, and what the report checks before showing one.
TABLES = {
    # `key` on every table a report row is picked from: a row given twice (a hand-edited table,
    # two runs' tables joined) was shown twice (Table 1, pre-training), or one of the two was
    # taken or both averaged without a word (Tables 2-3: the first; Figure 3: their mean)
    # (a ratio of two models' bytes, FLOPs or parameters is > 0: -1 was drawn as a measured point)
    "table1.csv": TableSpec(("model", "flops_ratio", "params_ratio"),
                            finite=("flops_ratio", "params_ratio", *_TABLE1_SHAPE),
                            positive=("flops_ratio", "params_ratio", *(c for c in _TABLE1_SHAPE if c != "n_shared")),
                            whole=_TABLE1_SHAPE,
                            numbers=tuple(c for c in _TABLE1_SEARCH if c != "search_objective"), key=("model",),
                            allowed=(("model", ALL_MODEL_NAMES),), together=(_TABLE1_SEARCH,)),
    "loading.csv": TableSpec(("model", "tokens", "ratio"), finite=("tokens", "ratio"), positive=("tokens", "ratio"),
                             numbers=_LOADING_FP8, key=("model", "tokens"), allowed=(("model", ALL_MODEL_NAMES),),
                             together=(_LOADING_FP8,)),
    "downstream.csv": TableSpec(("model", "task", "value"), numbers=("stderr", "n"), finite=("value",),
                                key=("run", "model", "task", "metric")),
    "perplexity.csv": TableSpec(("model", "dataset"), numbers=("word_perplexity", "byte_perplexity", "n"),
                                key=("run", "model", "dataset")),
    "tpot.csv": TableSpec(("model", "concurrency", "tpot_mean_ms"), finite=("concurrency", "tpot_mean_ms"),
                          whole=("concurrency",), key=("model", "concurrency")),
    "slo.csv": TableSpec(("tpot_budget_ms",), finite=("tpot_budget_ms",), key=("tpot_budget_ms", "slo_metric")),
    "pretrain/summary.csv": TableSpec(("val_loss",), finite=("val_loss",), key=("run", "size", "model", "seed"),
                                      allowed=(("model", MODELS),)),
    "microbench.csv": _KERNEL,
    "microbench_shared.csv": _KERNEL,
    "microbench_fp8.csv": replace(_KERNEL, required=_KERNEL.required + ("weight_dtype",)),
    "decode_tpot.csv": TableSpec(("model", "batch", "baseline_tpot_ms", "deamoe_tpot_ms"),
                                 finite=("batch", "baseline_tpot_ms", "deamoe_tpot_ms"),
                                 positive=("batch", "baseline_tpot_ms", "deamoe_tpot_ms"),
                                 provenance=("date", "git_sha"), key=("model", "batch"), rows=True,
                                 whole=("batch",)),
    "vllm_peer.csv": TableSpec(("model", "batch", "variant", "us", "bytes", "peak_read_tbps"),
                               finite=("batch", "us", "bytes", "peak_read_tbps"),
                               positive=("batch", "us", "bytes", "peak_read_tbps"), provenance=("date", "git_sha"),
                               rows=True, whole=("batch",)),
    "train_throughput.csv": TableSpec(("section", "shape", "ffn", "path", "ms"), finite=("ms",), positive=("ms",),
                                      provenance=("date", "git_sha"), rows=True),
    "read_sizes.csv": TableSpec(("mb", "tbps"), finite=("mb", "tbps"), positive=("mb", "tbps"),
                                provenance=("date", "git_sha"), rows=True),
    # a seed given twice would count twice in the mean over seeds
    # (a loss is > 0: a cross-entropy; -1 was averaged into a "within seed noise" verdict)
    "runs.csv": TableSpec(("size", "model", "seed", "val_loss"), finite=("seed", "val_loss", "params", "tokens"),
                          positive=("val_loss", "params", "tokens"), provenance=("date", "git_sha"),
                          key=("size", "model", "seed"), whole=("seed",)),
    "ablation/summary.csv": TableSpec(("variant", "loss_last_n"), finite=("seed", "loss_last_n"),
                                      positive=("loss_last_n",), key=("variant", "seed"), whole=("seed",),
                                      allowed=(("variant", tuple(row[0] for row in TABLE4)),)),
    # a step given twice would draw a run's curve back on itself and count in its smoothing twice
    "curves.csv": TableSpec(("run", "step", "tokens", "loss"), finite=("step", "tokens", "loss"),
                            positive=("step", "tokens", "loss"), key=("run", "step")),
    "evals.csv": TableSpec(("task", "value"), numbers=("value", "stderr"), key=("run", "task", "metric")),
}


def table_spec(path: str | Path) -> TableSpec:
    """The spec of a table named like one of TABLES (or none: any CSV)."""
    path = Path(path)
    return TABLES.get(f"{path.parent.name}/{path.name}") or TABLES.get(path.name, TableSpec())
