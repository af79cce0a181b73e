"""Training throughput on the GPU: the committed `train_throughput.csv` of `bench train`.

Two views of one table: the FFN layer's forward+backward beside torch._grouped_mm and a dense
SwiGLU FFN of equal FLOPs, and whole training steps (tokens/s, MFU, stages) of the layers' own
PyTorch path against the fast path (sort-based FFN, compiled layers).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from deamoe.report.sources import read_csv
from deamoe.report.artifact import NOT_RUN, Artifact

FILE = "train_throughput.csv"
COMMAND = "python -m deamoe bench train OUT (one GPU), --parts fsdp under torchrun for FSDP2"


def train_throughput(measured: Path) -> Artifact:
    src = read_csv(Path(measured) / FILE, required=("section", "shape", "ffn", "path", "ms"),
                   scale={"model_size": "gpu profile's largest size; Baseline-7B layer shape",
                          "tokens": "random tokens, 32,768 per step / layer call"})
    title = "Training throughput (one GPU): FFN layer forward+backward and whole steps"
    if not src.ok:
        src.reason += f"; measured on a CUDA GPU by: {COMMAND}"
        return Artifact("train_throughput", title, pd.DataFrame({"training throughput": [NOT_RUN]}), [src])
    df = src.frame
    cols = ["section", "shape", "ffn", "path", "world_size", "ms", "tflops", "vs_dense",
            "tokens_per_s", "mfu", "forward_ms", "backward_ms", "optimizer_ms"]
    table = df[[c for c in cols if c in df]]
    notes = ["layer: 32,768 tokens through one FFN layer (router included), bf16 autocast over "
             "float32 weights; tflops counts 3 x the forward FLOPs; vs_dense: the dense SwiGLU "
             "FFN of equal FLOPs' time over this row's",
             "step: the pretrain runs' whole step (32 x 1024 tokens), MFU against the measured "
             "794 TFLOP/s dense bf16 rate; path torch: the layers' own forward, eager; fast: "
             "deamoe.model.fast_ffn, eager; fast+compile: the same with torch.compile of each "
             "decoder layer and the loss (the gpu and slurm profiles' path)"]
    steps = df[df["section"] == "step"].set_index(["ffn", "path"])["ms"]
    for path in ("torch", "fast", "fast+compile"):
        if ("moe", path) in steps and ("deamoe", path) in steps:
            notes.append(f"DeaMoE / baseline step time ({path}): "
                         f"{steps[('deamoe', path)] / steps[('moe', path)]:.3f}")
    return Artifact("train_throughput", title, table.reset_index(drop=True), [src], notes, data=df)
