#!/usr/bin/env bash
# The dense department up-projection through cuBLAS (dense_up_cublas, kernels/fp8_dense_up.py) on
# one GPU: the committed H200 FP8 picks at >= MIN_BATCH tokens (default 64) with it, checked like
# the picks (eager battery case + two CUDA-graph replays against the float32 reference), then
# timed against the same picks without it (`bench variants`, interleaved rounds).  ~5-8 minutes
# at 64 and 128 tokens, about half at 128 only.
#   DEAMOE_GIT_SHA=<local sha> bash experiments/fp8-h200/cublas_stage.sh OUT [MIN_BATCH [ROUNDS]]
set -uo pipefail
out=${1:?usage: cublas_stage.sh OUT [MIN_BATCH [ROUNDS]]}
min_batch=${2:-64}
rounds=${3:-3}
source scripts/gpu_site.sh && gpu_site
export PYTHONPATH=src
table=reports/measured/h200/microbench_fp8.csv
points=$(python3 - "$table" /tmp/cublas_picks.csv "$min_batch" <<'PY'
import sys
import pandas as pd
d = pd.read_csv(sys.argv[1])
d = d[d.batch >= int(sys.argv[3])].assign(deamoe_tile=lambda t: t.deamoe_tile + ";dense_up_cublas=1")
d.to_csv(sys.argv[2], index=False)
print(" ".join(f"{m}:{b}" for m, b in zip(d.model, d.batch)))
PY
)
echo "points: $points"
timeout 240 python3 -m deamoe bench picks-check "$out/check" --table /tmp/cublas_picks.csv
echo "picks-check exit $?"
# shellcheck disable=SC2086  # one word per point
timeout 300 python3 -m deamoe bench variants "$out/ab" cublas:dense_up_cublas=1 $points \
    --table "$table" --weight-dtype fp8-w8a8 --rounds "$rounds"
echo "variants exit $?"
