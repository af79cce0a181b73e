#!/usr/bin/env bash
# The device call for issue 5: GPU correctness battery, read roofline, per-layer microbenchmark,
# model-level decode benchmark, all in one run (device time is scarce). Results land in $OUT/mb
# (roofline.json, battery.csv, microbench.csv, decode_tpot.csv, status.json) and $OUT/log.txt.
# Usage on the device machine, from the repository root:
#   OUT=/some/dir bash scripts/h200_kernels.sh [extra flags for `microbench`, e.g. --skip decode]
set -uo pipefail
OUT=${OUT:-results}
mkdir -p "$OUT/mb"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
export TQDM_DISABLE=1 TQDM_MININTERVAL=60
{
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())"
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} python3 -m deamoe.bench microbench \
      --config config.yaml --out "$OUT/mb" "$@"
  echo "exit $?"
} 2>&1 | tee "$OUT/log.txt"
