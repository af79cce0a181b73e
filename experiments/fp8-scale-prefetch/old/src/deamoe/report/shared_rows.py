"""Figures 4/5's shared-expert rows: the "<model>+shared" layers beside the routed-only ones.

The per-layer microbenchmark takes the "+shared" presets like any model name; their rows come
from this run's microbench.csv when it measured them, else from the committed
`reports/measured/<gpu>/microbench_shared.csv` (the same columns: it is a microbench.csv of the
three models, and of any routed-only layer measured with them that the main table lacks), else
they are "not run", with the command that measures them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from deamoe.bench.shared import SHARED_FILE, is_shared
from deamoe.shapes import SHARED_VARIANTS
from deamoe.report.sources import Loaded, read_csv

SHARED_MODELS = tuple(SHARED_VARIANTS)  # DeepSeek-V3+shared, DeepSeek-V2+shared, Kimi-K2+shared
MEASURE_COMMAND = (
    "python -m deamoe microbench --config workflow/profiles/gpu/microbench-shared.yaml "
    f"--out OUT --skip battery,torch,decode,vllm_peer (models {', '.join(SHARED_MODELS)}; "
    f"then OUT/microbench.csv -> reports/measured/<gpu>/{SHARED_FILE})"
)


def shared_peer_note(models: pd.Series) -> list[str]:
    """The vllm_peer table's note on its "+shared" rows (none without them)."""
    if not is_shared(models).any():
        return []
    return ["'<model>+shared' rows: both sides add the layer's shared experts -- ours on the "
            "schedule the per-layer benchmark picked, vLLM's shared-expert MLP (gate_up GEMM, "
            "SiLU*up, down GEMM) on its aux stream beside the fused MoE, then its add"]


def shared_rows(src: Loaded, measured: Path, scale: dict) -> tuple[Loaded, Loaded | None, str]:
    """(src with the shared-expert rows appended, their committed source or None, a note)."""
    if src.ok and is_shared(src.frame["model"]).any():
        return src, None, ("shared-expert rows (" + ", ".join(
            sorted(set(src.frame.model[is_shared(src.frame.model)]))) + ") measured in the same run")
    path = Path(measured) / SHARED_FILE
    committed = read_csv(path, required=("model", "batch", "baseline_us", "deamoe_us"),
                         scale=scale)
    if not committed.ok:
        return src, None, (f"shared-expert rows ({', '.join(SHARED_MODELS)}): not run (no "
                           f"{path}); measured on a CUDA GPU by: {MEASURE_COMMAND}")
    frame = committed.frame
    if src.ok:  # the main table's own rows stay; the shared ones (and layers it lacks) join it
        frame = frame[is_shared(frame["model"]) | ~frame["model"].isin(src.frame["model"])]
        src.frame = pd.concat([src.frame, frame], ignore_index=True)
    frame = frame[is_shared(frame["model"])]
    where = ", ".join(str(frame[c].iloc[0])[:10] for c in ("gpu", "date") if c in frame and len(frame))
    return src, committed, (f"shared-expert rows ({', '.join(sorted(set(frame.model)))}): committed "
                            f"{path}" + (f" ({where})" if where else "") + "; the shared "
                            "experts run in both layers, so their bytes pull the ideal speedup "
                            "toward 1")
