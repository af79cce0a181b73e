#!/usr/bin/env bash
# One device call for the fused routing kernel (NOTES.md v6): GPU routing check (GPU 1) and the
# per-layer microbenchmark (GPU 0) (scripts/h200_routing_run.yaml; microbench.csv is rewritten after each
# model, so an overrun late costs the last model only). <= 8 files come back under $OUT.
# Usage on the device machine: OUT=dir bash scripts/h200_routing_run.sh
set -uo pipefail
OUT=${OUT:-results/routing_run}
mkdir -p "$OUT/mb"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} CUDA_VISIBLE_DEVICES=0
# the routing check runs on the second GPU at the same time (its own process and GPU)
CUDA_VISIBLE_DEVICES=1 timeout "${T_CHECK:-200}" python3 scripts/h200_routing_check.py "$OUT" \
  > /tmp/routing_check.txt 2>&1 &
CHECK=$!
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
  SECONDS=0
  timeout "${T_MB:-290}" python3 -m deamoe.bench microbench --config scripts/h200_routing_run.yaml \
    --out "$OUT/mb"
  echo "microbench exit $? at ${SECONDS}s"
} 2>&1 | tee "$OUT/log.txt"
wait $CHECK
echo "check exit $?" | tee -a "$OUT/log.txt"
tee -a "$OUT/log.txt" < /tmp/routing_check.txt
