#!/usr/bin/env bash
# The GPU run behind reports/measured/h200/{microbench,decode_tpot}.csv: the full microbenchmark
# (scripts/h200_tables.yaml) on one H200, its log in $OUT/log.txt.  The device's copy of the
# tree has no .git: pass the local commit the tree matches as DEAMOE_GIT_SHA.  Carry .whl
# (scripts/gpu_wheels.sh) with the first call on a bare machine.
#   MODELS=a,b      those models only; SKIP=battery,decode  skip parts.  The three models' full
#                   search takes ~14 minutes, so run it as two calls (MODELS=DeepSeek-V3
#                   SKIP=battery,decode, then MODELS=Baseline-7B,Qwen3-235B-A22B) and merge
#                   them with `python -m deamoe bench import DIR1 DIR2 --sha SHA`.
#   TILES_FROM=csv  the decode benchmark's picks for models this call does not measure
#   CONFIG=yaml     another microbench config (scripts/h200_fp8.yaml: the FP8 layers)
#   WEIGHTS=a,b     those weight precisions only (bf16, fp8, fp8-w8a8); BATCHES=4,8  those batches
# A call stopped at its time limit keeps every point it finished ($OUT/microbench_points.csv);
# the same call again on the same OUT measures only the rest.
#   CHECK=1         first the committed picks and the stream options against the reference
#   TRACE=1         afterwards the kernel timeline of the picked layers
# Usage: DEAMOE_GIT_SHA=sha OUT=dir [MODELS=..] [SKIP=..] [CHECK=1] [TRACE=1] bash scripts/h200_microbench.sh
set -uo pipefail
: "${DEAMOE_GIT_SHA:?set DEAMOE_GIT_SHA to the local commit the working tree matches}"
OUT=${OUT:-results/h200_microbench}
mkdir -p "$OUT"
source "$(dirname "$0")/gpu_site.sh"   # the carried wheels (.whl: jsonschema, for the config) and src/
gpu_site || exit 1
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
{
  SECONDS=0
  if [ "${CHECK:-0}" = 1 ]; then
    timeout 200 python3 -m deamoe bench picks-check "$OUT" --all
    timeout 200 python3 -m deamoe bench stream-check "$OUT"
    echo "checks done at ${SECONDS}s"
  fi
  timeout "${T_MB:-560}" python3 -m deamoe.commands.bench_only microbench --config "${CONFIG:-scripts/h200_tables.yaml}" \
    --out "$OUT" ${MODELS:+--models "$MODELS"} ${SKIP:+--skip "$SKIP"} ${TILES_FROM:+--tiles-from "$TILES_FROM"} \
    ${WEIGHTS:+--weight-dtype "$WEIGHTS"} ${BATCHES:+--batches "$BATCHES"}
  echo "microbench exit $? at ${SECONDS}s"
  if [ "${TRACE:-0}" = 1 ]; then
    timeout 60 python3 -m deamoe bench trace "$OUT" --table "$OUT/microbench.csv"
    echo "trace exit $? at ${SECONDS}s"
  fi
} > "$OUT/log.txt" 2>&1
grep -E "ok, max rel err|exit|roofline|battery|span" "$OUT/log.txt"
