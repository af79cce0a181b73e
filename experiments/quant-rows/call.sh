#!/usr/bin/env bash
# One device call: the quantiser A/B where the card is an H200, then the FP8 checks on the new
# quantiser (fp8-check with vLLM beside, the FP8 table's picks eagerly and in CUDA graphs).
set -u
export DEAMOE_GIT_SHA=e4aec34
nvidia-smi --query-gpu=name --format=csv,noheader
bash experiments/quant-rows/run.sh
source scripts/gpu_site.sh && gpu_site || exit 1
timeout 240 python3 -m deamoe bench fp8-check "$OUT/c" --weight-dtype fp8-w8a8 \
    --models DeepSeek-V3,Qwen3-235B-A22B --kernel .peer/vllm_fused_moe.py 2>&1 | grep -E "ok|not run|Error" | tail -12
timeout 150 python3 -m deamoe bench picks-check "$OUT/p" --all \
    --table reports/measured/h200/microbench_fp8.csv 2>&1 | grep -E "ok|Error" | tail -5
