#!/usr/bin/env bash
# One GPU call: the 64-column '-qo' A/B of docs/kernels.md on both FP8 models (w8a8 weights,
# the committed microbench_fp8.csv picks as the control, best of two interleaved rounds).
# Carry .whl; pass DEAMOE_GIT_SHA.
#   DEAMOE_GIT_SHA=$(git rev-parse --short HEAD) bash experiments/fp8-qo64/ab.sh "$OUT"
# AB_MODELS='DeepSeek-V3' runs one model (up to 240 s each) where the device time left is short.
# Leaves $OUT/qo64.tar.xz (each model's variants table and log) and $OUT/log.txt.
set -uo pipefail
: "${DEAMOE_GIT_SHA:?set DEAMOE_GIT_SHA to the local commit the working tree matches}"
OUT=${1:?usage: ab.sh OUT}
mkdir -p "$OUT"
work=$(mktemp -d)
source "$(dirname "$0")/../../scripts/gpu_site.sh"
gpu_site || exit 1
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
TABLE=reports/measured/h200/microbench_fp8.csv
{
  SECONDS=0
  for m in ${AB_MODELS:-DeepSeek-V3 Qwen3-235B-A22B}; do
    timeout 240 python3 -m deamoe bench variants "$work/$m" \
      qo64-tma-swap:dept_up=n64-k128-w4-s6-tma-swap-pq-qo,expert_up=n64-k64-w4-s8-pq-qo,expert_down=n128-k64-w4-s8-tma-swap-pq \
      qo64-s4-nf:dept_up=n64-k128-w4-s4-pq-qo-nf,expert_up=n64-k64-w4-s8-pq-qo-nf,expert_down=n128-k64-w4-s8-tma-swap-pq-nf \
      k64-tma-swap:dept_up=n64-k128-w4-s6-tma-swap-pq,expert_up=n64-k64-w4-s8-pq,expert_down=n128-k64-w4-s8-tma-swap-pq \
      k64-s4-nf:dept_up=n64-k128-w4-s4-pq-nf,expert_up=n64-k64-w4-s8-pq-nf,expert_down=n128-k64-w4-s8-tma-swap-pq-nf \
      moe/qo64:w13=n64-k128-w4-s5-tma-swap-pq-qo,w2=n128-k64-w4-s8-tma-swap-pq \
      moe/k64:w13=n64-k128-w4-s5-tma-swap-pq,w2=n128-k64-w4-s8-tma-swap-pq \
      "$m:4" "$m:16" "$m:64" "$m:128" --table "$TABLE" --weight-dtype fp8-w8a8
    echo "$m variants exit $? at ${SECONDS}s"
  done
} > "$OUT/log.txt" 2>&1
tar -C "$work" -cJf "$OUT/qo64.tar.xz" . && rm -rf "$work"
tail -40 "$OUT/log.txt"
