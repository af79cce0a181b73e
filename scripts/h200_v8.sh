#!/usr/bin/env bash
# v8 device call on one H200 (NOTES.md v8): routing kernel check + timing (warps 1/2/4/8), the
# full microbenchmark with the v8 routing kernel (scripts/h200_v7_final.yaml), then the kernel
# timeline.  Usage: DEAMOE_GIT_SHA=sha OUT=dir bash scripts/h200_v8.sh
set -uo pipefail
OUT=${OUT:-results/v8}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
{
  SECONDS=0
  timeout 100 python3 scripts/h200_routing_check.py "$OUT" 2>&1 | grep -v Warn | tail -45
  echo "routing check exit ${PIPESTATUS[0]} at ${SECONDS}s"
  timeout 400 python3 -m deamoe.bench microbench --config scripts/h200_v7_final.yaml --out "$OUT"
  echo "microbench exit $? at ${SECONDS}s"
  timeout 60 python3 scripts/h200_trace.py "$OUT/microbench.csv" "$OUT" 2>&1 | grep -E "span|no kernel"
  echo "trace exit at ${SECONDS}s"
} > "$OUT/log.txt" 2>&1
grep -E "routing check|exit|roofline|battery|span" "$OUT/log.txt"
python3 -c "
import pandas as pd
d = pd.read_csv('$OUT/microbench.csv')
print(d[['model','batch','baseline_us','deamoe_us','speedup','speedup_over_ideal','baseline_frac_peak','deamoe_frac_peak','vllm_h200_us']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
t = pd.read_csv('$OUT/decode_tpot.csv'); print(t[['model','batch','baseline_tpot_ms','deamoe_tpot_ms','speedup']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
"
