#!/usr/bin/env bash
# v7 final device call on two H200s: GPU 0 runs DeepSeek-V3 (battery first), GPU 1 Baseline-7B
# and Qwen3 then the decode benchmark; each half writes its tables as it goes, then they are
# merged into OUT/{microbench,stages,battery,decode_tpot}.csv, roofline.json, status.json
# (<= 8 files come back).  Usage: DEAMOE_GIT_SHA=sha OUT=dir bash scripts/h200_v7_final.sh
set -uo pipefail
OUT=${OUT:-results/v7_final}
mkdir -p "$OUT/g0" "$OUT/g1"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
CFG=scripts/h200_v7_final.yaml
CUDA_VISIBLE_DEVICES=1 timeout "${T_MB:-500}" python3 -m deamoe.bench microbench --config $CFG \
  --models Baseline-7B,Qwen3-235B-A22B --skip battery --out "$OUT/g1" > "$OUT/g1/log.txt" 2>&1 &
G1=$!
CUDA_VISIBLE_DEVICES=0 timeout "${T_MB:-500}" python3 -m deamoe.bench microbench --config $CFG \
  --models DeepSeek-V3 --skip decode --out "$OUT/g0" > "$OUT/g0/log.txt" 2>&1
echo "GPU 0 exit $?"
wait $G1
echo "GPU 1 exit $?"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
import pandas as pd
out = Path(sys.argv[1])
for name in ("microbench.csv", "stages.csv", "battery.csv", "decode_tpot.csv"):
    parts = [pd.read_csv(p) for p in (out / "g0" / name, out / "g1" / name) if p.exists()]
    if parts:
        pd.concat(parts).to_csv(out / name, index=False)
for name in ("roofline.json", "status.json"):
    merged = {g: json.loads((out / g / name).read_text()) for g in ("g0", "g1") if (out / g / name).exists()}
    (out / name).write_text(json.dumps(merged, indent=1))
log = "".join(f"==== {g}\n" + (out / g / "log.txt").read_text() for g in ("g0", "g1"))
(out / "log.txt").write_text(log)
PY
rm -rf "$OUT/g0" "$OUT/g1"
grep -E "roofline|battery|exit|Error|error" "$OUT/log.txt" | head -20
python3 -c "
import pandas as pd
d = pd.read_csv('$OUT/microbench.csv')
print(d[['model','batch','baseline_us','deamoe_us','speedup','speedup_over_ideal','baseline_frac_peak','deamoe_frac_peak','vllm_h200_us','torch_grouped_us']].to_string(index=False, float_format=lambda v: f'{v:.3g}'))
t = pd.read_csv('$OUT/decode_tpot.csv'); print(t.to_string(index=False, float_format=lambda v: f'{v:.3g}'))
"
