#!/usr/bin/env bash
# One device call for v7 (NOTES.md): preflight (PDL/prefetch usable and correct in a CUDA
# graph?), align benchmark (where DeaMoE's align time goes), then the microbenchmark with PDL
# on GPU 0 and with PDL off on GPU 1 at the same time.  Usage: OUT=dir bash scripts/h200_v7_ab.sh
set -uo pipefail
OUT=${OUT:-results/v7_ab}
mkdir -p "$OUT/on" "$OUT/off"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
  SECONDS=0
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 scripts/h200_v7_preflight.py | tee /tmp/preflight.txt
  eval "$(tail -1 /tmp/preflight.txt | grep '^export ' || echo 'export DEAMOE_PDL=0 DEAMOE_PREFETCH=0')"
  echo "preflight done at ${SECONDS}s: DEAMOE_PDL=$DEAMOE_PDL DEAMOE_PREFETCH=$DEAMOE_PREFETCH"
  CUDA_VISIBLE_DEVICES=1 DEAMOE_PDL=0 timeout "${T_MB:-330}" python3 -m deamoe.bench microbench \
    --config scripts/h200_v7_ab.yaml --out "$OUT/off" --skip battery > "$OUT/off/log.txt" 2>&1 &
  OFF=$!
  CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m deamoe.kernels.align_benchmark 16 64 128
  CUDA_VISIBLE_DEVICES=0 timeout "${T_MB:-330}" python3 -m deamoe.bench microbench \
    --config scripts/h200_v7_ab.yaml --out "$OUT/on"
  echo "microbench (PDL $DEAMOE_PDL) exit $? at ${SECONDS}s"
  wait $OFF
  echo "microbench (PDL 0) exit $? at ${SECONDS}s"
  tail -40 "$OUT/off/log.txt"
} 2>&1 | tee "$OUT/log.txt"
