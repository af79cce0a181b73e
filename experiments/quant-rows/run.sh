#!/usr/bin/env bash
# A/B of the quantiser's rows per program (QUANT_ROWS rows a program, against one row a program,
# the tree at git 88c2ca2 copied under old/): the committed FP8 picks, both layers, the two trees
# interleaved twice -> $OUT/quant_rows_ab.csv (one file: the device brings back 8 at most).
set -u
source scripts/gpu_site.sh && gpu_site || exit 1
POINTS="DeepSeek-V3:4 DeepSeek-V3:16 DeepSeek-V3:64 DeepSeek-V3:128 Qwen3-235B-A22B:4 Qwen3-235B-A22B:16 Qwen3-235B-A22B:64 Qwen3-235B-A22B:128"
run() {  # tree, round
    local src=src; [ "$1" = old ] && src=experiments/quant-rows/old/src
    PYTHONPATH=/tmp/site:$src timeout 140 python3 -m deamoe bench variants "/tmp/ab/$1$2" $POINTS \
        --table reports/measured/h200/microbench_fp8.csv --weight-dtype fp8-w8a8 --rounds 2 \
        > "/tmp/ab/$1$2.log" 2>&1
    echo "$1$2 rc $? $(date +%T)"
}
mkdir -p /tmp/ab
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    echo "not an H200: the A/B ran on an H100 already"; exit 0
fi
run old 1; run new 1; run old 2; run new 2
python3 - "$OUT/quant_rows_ab.csv" <<'PY'
import sys, subprocess, datetime, pandas as pd, torch, triton
gpu = torch.cuda.get_device_name()
parts = []
for tree, sha in (("old", "88c2ca2"), ("new", "e4aec34")):
    for n in (1, 2):
        d = pd.read_csv(f"/tmp/ab/{tree}{n}/variants.csv").drop(columns=["runs"])
        parts.append(d.assign(quantiser=tree, call_round=n, git_sha=sha))
df = pd.concat(parts).assign(gpu=gpu, torch=torch.__version__.split("+")[0], triton=triton.__version__,
                             date=datetime.date.today().isoformat())
df.to_csv(sys.argv[1], index=False)
print(df.pivot_table(index=["model", "kind", "batch", "variant"], columns=["quantiser", "call_round"], values="us").round(1).to_string())
PY
