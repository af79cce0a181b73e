#!/usr/bin/env bash
# One device call: the staged dense department GEMM (dense_staged) against the committed H100
# w8a8 picks, both layers, interleaved rounds -> $OUT/dense_staged_ab.csv; then the stream
# options (the new schedule among them) against the reference on the GPU -> $OUT/stream_check.csv.
set -u
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
source scripts/gpu_site.sh && gpu_site || exit 1
POINTS="Qwen3-235B-A22B:4 Qwen3-235B-A22B:16 DeepSeek-V3:4 DeepSeek-V3:16 Qwen3-235B-A22B:64 Qwen3-235B-A22B:128 DeepSeek-V3:64 DeepSeek-V3:128"
timeout 300 python3 -m deamoe bench variants /tmp/ab \
    staged2:split_launches=2,dense_parts=0,dense_staged=1 \
    staged4:split_launches=4,dense_parts=0,dense_staged=1 \
    staged4p2:split_launches=4,dense_parts=2,dense_staged=1 $POINTS \
    --table reports/measured/h100/microbench_fp8.csv --weight-dtype fp8-w8a8 --rounds 3 2>&1 | tail -30
cp /tmp/ab/variants.csv "$OUT/dense_staged_ab.csv"
timeout 200 python3 -m deamoe bench stream-check /tmp/sc 2>&1 | tail -4
cp /tmp/sc/stream_check.csv "$OUT/" 2>/dev/null
