#!/usr/bin/env bash
# The dense department up-projection through cuBLAS (dense_up_cublas, kernels/fp8_dense_up.py) on
# one GPU: the committed H200 FP8 picks at 64 and 128 tokens with it, checked like the picks
# (eager battery case + two CUDA-graph replays against the float32 reference), then timed
# against the same picks without it (`bench variants`, interleaved rounds).  ~5-8 minutes.
#   DEAMOE_GIT_SHA=<local sha> bash experiments/fp8-h200/cublas_stage.sh OUT
set -uo pipefail
out=${1:?usage: cublas_stage.sh OUT}
source scripts/gpu_site.sh && gpu_site
export PYTHONPATH=src
table=reports/measured/h200/microbench_fp8.csv
python3 - "$table" /tmp/cublas_picks.csv <<'PY'
import sys
import pandas as pd
d = pd.read_csv(sys.argv[1])
d = d[d.batch >= 64].assign(deamoe_tile=lambda t: t.deamoe_tile + ";dense_up_cublas=1")
d.to_csv(sys.argv[2], index=False)
PY
timeout 240 python3 -m deamoe bench picks-check "$out/check" --table /tmp/cublas_picks.csv --all
echo "picks-check exit $?"
timeout 300 python3 -m deamoe bench variants "$out/ab" cublas:dense_up_cublas=1 \
    DeepSeek-V3:128 Qwen3-235B-A22B:128 DeepSeek-V3:64 Qwen3-235B-A22B:64 \
    --table "$table" --weight-dtype fp8-w8a8 --rounds 3
echo "variants exit $?"
