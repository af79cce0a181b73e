#!/usr/bin/env bash
# One GPU call: the '-qs' A/B of docs/kernels.md on both FP8 models (w8a8 weights, the committed
# microbench_fp8.csv picks as the control, best of two interleaved rounds).  Each variant is the
# committed knobs with '-qs' set on up-projection tiles ('+qs' puts the flag in its place in the
# tile name); the readers keep their committed tiles, and read the bf16 output with its absmax
# instead of a quantiser launch's e4m3:
#   qs         DeaMoE's dept_up and expert_up both '-qs' (two quantiser launches fewer per chain)
#   qs-dept    dept_up only (expert_up reads the department output with its absmax)
#   qs-expert  expert_up only (expert_down reads the expert output with its absmax)
#   moe/qs     the baseline's w13 (w2 reads the hidden rows with their absmax)
# Carry .whl (bash scripts/gpu_wheels.sh); pass DEAMOE_GIT_SHA.
#   DEAMOE_GIT_SHA=$(git rev-parse --short HEAD) bash experiments/fp8-qs/ab.sh "$OUT"
# AB_MODELS='DeepSeek-V3' runs one model (up to 270 s each) where the device time left is short.
# Leaves $OUT/qs.tar.xz (each model's variants table and log) and $OUT/log.txt.
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
    timeout 270 python3 -m deamoe bench variants "$work/$m" \
      qs:dept_up=+qs,expert_up=+qs qs-dept:dept_up=+qs qs-expert:expert_up=+qs moe/qs:w13=+qs \
      "$m:4" "$m:16" "$m:64" "$m:128" --table "$TABLE" --weight-dtype fp8-w8a8
    echo "$m variants exit $? at ${SECONDS}s"
  done
} > "$OUT/log.txt" 2>&1
tar -C "$work" -cJf "$OUT/qs.tar.xz" . && rm -rf "$work"
tail -40 "$OUT/log.txt"
