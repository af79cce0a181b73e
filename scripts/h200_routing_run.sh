#!/usr/bin/env bash
# One device call for the fused routing kernel (NOTES.md v6): GPU routing check, then the
# per-layer microbenchmark (scripts/h200_routing_run.yaml; microbench.csv is rewritten after each
# model, so an overrun late costs the last model only). <= 8 files come back under $OUT.
# Usage on the device machine: OUT=dir bash scripts/h200_routing_run.sh
set -uo pipefail
OUT=${OUT:-results/routing_run}
mkdir -p "$OUT/mb"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} CUDA_VISIBLE_DEVICES=0
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
  SECONDS=0
  timeout "${T_CHECK:-45}" python3 scripts/h200_routing_check.py "$OUT"
  echo "check exit $? at ${SECONDS}s"
  timeout "${T_MB:-260}" python3 -m deamoe.bench microbench --config scripts/h200_routing_run.yaml \
    --out "$OUT/mb"
  echo "microbench exit $? at ${SECONDS}s"
} 2>&1 | tee "$OUT/log.txt"
