#!/usr/bin/env bash
# One device call: the FP8 main loop with its scales loaded a step ahead (this tree) against the
# tree before (old/src, git 9b3484b), the committed H100 w8a8 picks of both layers, the two trees
# interleaved twice -> $OUT/scale_prefetch_ab.csv; then bench fp8-check on this tree.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/gpu_site.sh && gpu_site || exit 1
POINTS="DeepSeek-V3:4 DeepSeek-V3:16 DeepSeek-V3:64 DeepSeek-V3:128 Qwen3-235B-A22B:4 Qwen3-235B-A22B:16 Qwen3-235B-A22B:64 Qwen3-235B-A22B:128"
run() {  # tree, round
    local src=src; [ "$1" = old ] && src=experiments/fp8-scale-prefetch/old/src
    PYTHONPATH=/tmp/site:$src timeout 150 python3 -m deamoe bench variants "/tmp/ab/$1$2" $POINTS \
        --table reports/measured/h100/microbench_fp8.csv --weight-dtype fp8-w8a8 --rounds 2 \
        > "/tmp/ab/$1$2.log" 2>&1
    echo "$1$2 rc $? $(date +%T)"
}
mkdir -p /tmp/ab
run old 1; run new 1; run old 2; run new 2
python3 - "$OUT/scale_prefetch_ab.csv" <<'PY'
import os, sys, datetime, pandas as pd, torch, triton
parts = []
for tree, sha in (("old", "9b3484b"), ("new", os.environ["DEAMOE_GIT_SHA"])):
    for n in (1, 2):
        try:
            d = pd.read_csv(f"/tmp/ab/{tree}{n}/variants.csv").drop(columns=["runs"])
        except FileNotFoundError:
            print(f"{tree}{n}: no table"); continue
        parts.append(d.assign(tree=tree, call_round=n, git_sha=sha))
df = pd.concat(parts).assign(gpu=torch.cuda.get_device_name(), torch=torch.__version__.split("+")[0],
                             triton=triton.__version__, date=datetime.date.today().isoformat())
df.to_csv(sys.argv[1], index=False)
piv = df.groupby(["model", "kind", "batch", "variant", "tree"]).us.min().unstack("tree")
piv["new/old"] = piv["new"] / piv["old"]
print(piv.round(3).to_string())
PY
timeout 150 python3 -m deamoe bench fp8-check "$OUT/c" --weight-dtype fp8-w8a8 \
    --models DeepSeek-V3,Qwen3-235B-A22B 2>&1 | grep -E "ok|not run|Error" | tail -8
