#!/usr/bin/env bash
# One device call.  On an H200: the w8a8 table searched again for Qwen3 (the H200 picks among the
# finalists) -> $OUT/q.  On an H100: DeaMoE split in three parts against the committed H100 w8a8
# picks (the search offers 1 / 2 / 4 parts) -> $OUT/split3_ab.csv.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
if [[ $gpu == *H200* ]]; then
    OUT=$OUT/q CONFIG=experiments/fp8-h200/h200_fp8_prior.yaml MODELS=Qwen3-235B-A22B \
        WEIGHTS=fp8-w8a8 BATCHES=4,16,64,128 T_MB=540 bash scripts/h200_microbench.sh
    tail -12 "$OUT/q/log.txt"
    exit
fi
source scripts/gpu_site.sh && gpu_site || exit 1
timeout 300 python3 -m deamoe bench variants /tmp/ab \
    split3:split_launches=3,dense_parts=0 split3p1:split_launches=3,dense_parts=1 \
    split3p2:split_launches=3,dense_parts=2 \
    Qwen3-235B-A22B:4 Qwen3-235B-A22B:16 DeepSeek-V3:4 DeepSeek-V3:16 Qwen3-235B-A22B:64 \
    Qwen3-235B-A22B:128 DeepSeek-V3:64 DeepSeek-V3:128 \
    --table reports/measured/h100/microbench_fp8.csv --weight-dtype fp8-w8a8 --rounds 3 2>&1 | tail -24
cp /tmp/ab/variants.csv "$OUT/split3_ab.csv"
