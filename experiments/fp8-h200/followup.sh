#!/usr/bin/env bash
# The H200 FP8 table's three follow-ups in one device call (about 9 minutes with the defaults):
#   1. `bench picks-check --all` on reports/measured/h200/microbench_fp8.csv (its picks are
#      combinations no battery has run as a whole; ~35 s),
#   2. vLLM's FP8 fused MoE re-timed beside the table's baseline picks (`bench peer run`, ~90 s),
#   3. the department-GEMM probe (dept_gemm_probe.py; no new variant starts past PROBE_BUDGET_S).
# Carry .whl and .peer.  The device's tree has no .git: pass the local commit as DEAMOE_GIT_SHA.
#   DEAMOE_GIT_SHA=<sha> bash experiments/fp8-h200/followup.sh OUT [PROBE_BUDGET_S]
# OUT gets picks_check.csv, vllm_peer.csv, dept_gemm_probe.csv and log.txt (the steps write their
# folders under /tmp: with their markers they were more files than a device call brings back);
# exit status: the first failing step's.
set -uo pipefail
out=${1:?usage: DEAMOE_GIT_SHA=sha bash experiments/fp8-h200/followup.sh OUT [PROBE_BUDGET_S]}
budget=${2:-300}
[[ "$budget" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "followup: PROBE_BUDGET_S='$budget' must be 1-9999 s" >&2; exit 2; }
: "${DEAMOE_GIT_SHA:?set DEAMOE_GIT_SHA to the local commit the working tree matches}"
source "$(dirname "$0")/../../scripts/gpu_site.sh"
gpu_sha_ok followup || exit 2
out=$(gpu_abspath "$out")
cd "$(dirname "$0")/../.."
gpu_claim "$out" log.txt picks_check.csv vllm_peer.csv dept_gemm_probe.csv || exit 2
work=$(mktemp -d /tmp/followup.XXXXXX)
gpu_site || exit 1
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
points=()
for model in DeepSeek-V3 Qwen3-235B-A22B; do
    for batch in 4 16 64 128; do points+=("$model:$batch"); done
done
rc=0
step() {  # step NAME COMMAND...: run it, print its exit status and time, keep the first failure
    local name=$1; shift
    "$@"; local status=$?
    echo "$name exit $status at ${SECONDS}s"
    [ "$rc" != 0 ] || rc=$status
    for table in pc/picks_check.csv peer/vllm_peer.csv dept/dept_gemm_probe.csv; do
        [ ! -f "$work/$table" ] || cp "$work/$table" "$out/"  # each step's table once it is done
    done
}
exec > >(tee "$out/log.txt") 2>&1
SECONDS=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step picks-check python3 -m deamoe bench picks-check "$work/pc" --all \
    --table reports/measured/h200/microbench_fp8.csv
step peer python3 -m deamoe bench peer run "$work/peer" "${points[@]}" --weight-dtype fp8-w8a8 \
    --table reports/measured/h200/microbench.csv --kernel .peer/vllm_fused_moe.py
step probe python3 experiments/fp8-h200/dept_gemm_probe.py --out "$work/dept" --budget-s "$budget"
exit "$rc"
