#!/usr/bin/env bash
# One device call: the w8a8 FP8 GEMMs with K steps of one 256-column box (two scale blocks)
# against the committed H100 picks (k128 steps), both layers, every point; the GEMM probe first.
#   DEAMOE_GIT_SHA=<sha> bash experiments/fp8-k256/ab.sh $OUT     (carry [".whl"])
set -uo pipefail
out=$1
source scripts/gpu_site.sh && gpu_site || exit 1
export PYTHONUNBUFFERED=1
T=reports/measured/h100/microbench_fp8.csv
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
timeout 60 python3 experiments/fp8-row-bytes/gemm_probe.py 2>&1 | tee "$out/gemm_probe.log"
# the baseline: same stages (where they fit), stages halved (bytes in flight kept)
MOE="moe/k256:w13=+k256,w2=+k256 moe/k256s3:w13=+k256-s3,w2=+k256-s3 moe/k256s2:w13=+k256-s2,w2=+k256-s3"
# points whose dept_down reads no stored '-qo' output: every DeaMoE GEMM may step 256 columns
python3 -m deamoe bench variants "$out/a" --table $T --weight-dtype fp8-w8a8 --rounds 2 $MOE \
    k256:dept_up=+k256,expert_up=+k256,expert_down=+k256,dept_down=+k256 \
    k256s3:dept_up=+k256-s3,expert_up=+k256-s3,expert_down=+k256-s3,dept_down=+k256-s3 \
    k256dept:dept_up=+k256,dept_down=+k256-s3 \
    k256up:dept_up=+k256,expert_up=+k256 \
    Qwen3-235B-A22B:4 Qwen3-235B-A22B:128 DeepSeek-V3:64 DeepSeek-V3:128 Qwen3-235B-A22B:64 \
    2>&1 | tee "$out/a.log"
python3 -m deamoe bench variants "$out/b" --table $T --weight-dtype fp8-w8a8 --rounds 2 $MOE \
    k256:dept_up=+k256,expert_up=+k256,expert_down=+k256 \
    k256s3:dept_up=+k256-s3,expert_up=+k256-s3,expert_down=+k256-s3 \
    k256up:dept_up=+k256,expert_up=+k256 \
    Qwen3-235B-A22B:16 DeepSeek-V3:4 DeepSeek-V3:16 2>&1 | tee "$out/b.log"
