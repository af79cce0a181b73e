#!/usr/bin/env bash
# The device call behind the committed H200 kernel tables (NOTES.md v8, v9, v11, v13, v14): the full
# microbenchmark (scripts/h200_v7_final.yaml: battery, roofline, ten batch sizes, stage breakdown,
# decode TPOT) on one GPU; with ROUTING_CHECK=1 first the routing kernel's check and timing
# (v8), with READ_SIZES=1 first the streaming read by read size (v11), with TRACE=1 afterwards
# the kernel timeline of each layer (v8).  <= 8 files come back.
# MODELS=a,b runs those models only and SKIP=battery,decode skips parts (a search with
# final_tile_pass needs two 10-minute device calls for the three models, NOTES.md v25; merge the
# two outputs with scripts/import_h200.py DIR1 DIR2).
# Usage: DEAMOE_GIT_SHA=sha OUT=dir [MODELS=..] [SKIP=..] [TILES_FROM=microbench.csv] [ROUTING_CHECK=1] [TRACE=1] [READ_SIZES=1] bash scripts/h200_microbench.sh
set -uo pipefail
# the device's copy of the repository does not carry the current .git (v14 found its HEAD at the
# session's first commit): write the local `git rev-parse HEAD` into the device command literally
: "${DEAMOE_GIT_SHA:?set DEAMOE_GIT_SHA to the local commit the working tree matches}"
OUT=${OUT:-results/h200_microbench}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
{
  SECONDS=0
  if [ "${ROUTING_CHECK:-0}" = 1 ]; then
    timeout 100 python3 scripts/h200_routing_check.py "$OUT" 2>&1 | grep -v Warn | tail -45
    echo "routing check exit ${PIPESTATUS[0]} at ${SECONDS}s"
  fi
  if [ "${READ_SIZES:-0}" = 1 ]; then
    timeout 50 python3 scripts/h200_read_sizes.py "$OUT" 2>&1 | grep -E "MB x"
    echo "read sizes exit at ${SECONDS}s"
  fi
  timeout "${T_MB:-520}" python3 -m deamoe.bench microbench --config scripts/h200_v7_final.yaml \
    --out "$OUT" ${MODELS:+--models "$MODELS"} ${SKIP:+--skip "$SKIP"} ${TILES_FROM:+--tiles-from "$TILES_FROM"}
  echo "microbench exit $? at ${SECONDS}s"
  if [ "${TRACE:-0}" = 1 ]; then
    timeout 60 python3 scripts/h200_trace.py "$OUT/microbench.csv" "$OUT" 2>&1 | grep -E "span|no kernel"
    echo "trace exit at ${SECONDS}s"
  fi
} > "$OUT/log.txt" 2>&1
grep -E "routing check|exit|roofline|battery|span|MB x" "$OUT/log.txt"
python3 -c "
import pandas as pd
d = pd.read_csv('$OUT/microbench.csv')
print(d[['model','batch','baseline_us','deamoe_us','speedup','speedup_over_ideal','baseline_frac_peak','deamoe_frac_peak','vllm_h200_us','baseline_from_logits_us']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
import os
if os.path.exists('$OUT/decode_tpot.csv'):
    t = pd.read_csv('$OUT/decode_tpot.csv'); print(t[['model','batch','baseline_tpot_ms','deamoe_tpot_ms','speedup']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
"
