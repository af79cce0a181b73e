#!/usr/bin/env bash
# Second v7 device call: align with int32 division (and a no-dedup timing variant) on GPU 0,
# the department-GEMM BLOCK_M x tile sweep on GPU 1.  Usage: OUT=dir bash scripts/h200_v7b.sh
set -uo pipefail
OUT=${OUT:-results/v7b}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
CUDA_VISIBLE_DEVICES=1 timeout 330 python3 scripts/h200_dept_sweep.py "$OUT" > "$OUT/sweep.txt" 2>&1 &
SW=$!
CUDA_VISIBLE_DEVICES=0 timeout 90 python3 -m deamoe.kernels.align_benchmark 16 64 128 2>&1 | tee "$OUT/align.txt"
wait $SW
echo "sweep exit $?"
tail -60 "$OUT/sweep.txt"
