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
# the same call again on the same OUT measures only the rest (on a machine that starts bare, bring
# OUT back whole: its .deamoe-output marker, which git ignores, names the files as this script's).
#   CHECK=1         first the committed picks and the stream options against the reference
#   TRACE=1         afterwards the kernel timeline of the picked layers
# Usage: DEAMOE_GIT_SHA=sha OUT=dir [MODELS=..] [SKIP=..] [CHECK=1] [TRACE=1] bash scripts/h200_microbench.sh
# Exit status: the first nonzero one of its commands (0: all of them succeeded).
set -uo pipefail
[ $# = 0 ] || {  # `... h200_microbench.sh MODELS=x` measured every model, the argument ignored
    echo "h200_microbench: takes no arguments, got '$1': its settings are environment variables (MODELS=a,b bash $0)" >&2
    exit 2; }
: "${DEAMOE_GIT_SHA:?set DEAMOE_GIT_SHA to the local commit the working tree matches}"
for flag in CHECK TRACE; do
    [[ "${!flag:-0}" =~ ^[01]$ ]] || { echo "h200_microbench: $flag='${!flag}' must be 0 or 1" >&2; exit 2; }
done
# at most 9 digits, as gpu_run.sh's GPU_RUN_LIMIT: timeout takes a longer number as no limit at all
[[ "${T_MB:-560}" =~ ^[1-9][0-9]{0,8}$ ]] || {
    echo "h200_microbench: T_MB='${T_MB}' must be a whole number of seconds >= 1 and below 10^9" >&2; exit 2; }
source "$(dirname "$0")/gpu_site.sh"   # the carried wheels (.whl: jsonschema, for the config) and src/
gpu_sha_ok h200_microbench || exit 2
# paths given are the caller's; the script runs in the repository root (.whl, src/, the default config)
for var in OUT CONFIG TILES_FROM; do
    [ -z "${!var:-}" ] || printf -v "$var" '%s' "$(gpu_abspath "${!var}")"
done
cd "$(dirname "$0")/.."
OUT=${OUT:-results/h200_microbench}
gpu_claim "$OUT" log.txt || exit 2   # a log this script wrote, in no folder of user files
gpu_site || exit 1
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
rc=0
step() {  # step NAME COMMAND...: run it, echo its exit status, keep the first failure's
    local name=$1; shift
    "$@"; local status=$?
    echo "$name exit $status at ${SECONDS}s"
    [ "$rc" != 0 ] || rc=$status
}
{
  SECONDS=0
  if [ "${CHECK:-0}" = 1 ]; then
    step picks-check timeout 200 python3 -m deamoe.commands.bench_only bench picks-check "$OUT" --all
    step stream-check timeout 200 python3 -m deamoe.commands.bench_only bench stream-check "$OUT"
  fi
  step microbench timeout "${T_MB:-560}" python3 -m deamoe.commands.bench_only microbench --config "${CONFIG:-scripts/h200_tables.yaml}" \
    --out "$OUT" ${MODELS:+--models "$MODELS"} ${SKIP:+--skip "$SKIP"} ${TILES_FROM:+--tiles-from "$TILES_FROM"} \
    ${WEIGHTS:+--weight-dtype "$WEIGHTS"} ${BATCHES:+--batches "$BATCHES"}
  if [ "${TRACE:-0}" = 1 ]; then
    step trace timeout 60 python3 -m deamoe.commands.bench_only bench trace "$OUT" --table "$OUT/microbench.csv"
  fi
} > "$OUT/log.txt" 2>&1
grep -E "ok, max rel err|exit|roofline|battery|span|error" "$OUT/log.txt"
exit "$rc"
