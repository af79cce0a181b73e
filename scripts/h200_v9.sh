#!/usr/bin/env bash
# v9 device call on one H200 (NOTES.md v9): the full microbenchmark (scripts/h200_v7_final.yaml)
# with two small-shared-memory tiles added to the search (more CTAs resident per SM).
# Usage: DEAMOE_GIT_SHA=sha OUT=dir bash scripts/h200_v9.sh
set -uo pipefail
OUT=${OUT:-results/v9}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
SECONDS=0
timeout "${T_MB:-520}" python3 -m deamoe.bench microbench --config scripts/h200_v7_final.yaml \
  --out "$OUT" > "$OUT/log.txt" 2>&1
echo "microbench exit $? at ${SECONDS}s" | tee -a "$OUT/log.txt"
grep -E "roofline|battery" "$OUT/log.txt"
python3 -c "
import pandas as pd
d = pd.read_csv('$OUT/microbench.csv')
print(d[['model','batch','baseline_us','deamoe_us','speedup','speedup_over_ideal','baseline_frac_peak','deamoe_frac_peak','vllm_h200_us']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
t = pd.read_csv('$OUT/decode_tpot.csv'); print(t[['model','batch','baseline_tpot_ms','deamoe_tpot_ms','speedup']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
"
