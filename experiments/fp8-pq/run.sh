#!/usr/bin/env bash
# One device call of the FP8 '-pq' measurement (carry .whl and .peer): resume the search from
# the points committed here (a warm machine's /tmp/w/fp8 from the previous call is kept), and once
# its w8a8 table holds every point of MODELS, check the picks against the reference and time
# vLLM's FP8 fused MoE beside our baseline, then `bench fp8-check` (its -pq pass included;
# FP8_CHECK=0 skips it).  Everything under /tmp/w goes to $OUT/fp8.tar.gz.
#   DEAMOE_GIT_SHA=sha [T_MB=520] [MODELS=..] [WEIGHTS=fp8-w8a8] bash experiments/fp8-pq/run.sh "$OUT"
set -uo pipefail
out=${1:?usage: run.sh OUT}
: "${DEAMOE_GIT_SHA:?set DEAMOE_GIT_SHA to the local commit the working tree matches}"
here=experiments/fp8-pq W=/tmp/w/fp8
models=${MODELS:-DeepSeek-V3,Qwen3-235B-A22B}
if [ ! -f "$W/microbench_points.csv" ]; then
    mkdir -p "$W" && cp "$here"/{microbench_points.csv,stages.csv,roofline.json,microbench_fp8.csv} "$W"/
    printf 'written by python -m deamoe: the files named below\nroofline.json\nmicrobench_points.csv\nstages.csv\nmicrobench_fp8.csv\n' > "$W/.deamoe-output"
fi
OUT=$W CONFIG=scripts/h200_fp8.yaml MODELS=$models WEIGHTS=${WEIGHTS:-fp8-w8a8} BATCHES=4,16,64,128 \
    T_MB=${T_MB:-520} bash scripts/h200_microbench.sh
source scripts/gpu_site.sh && gpu_site || exit 1
want=$(( $(tr ',' '\n' <<< "$models" | wc -l) * 4 ))
have=$(python3 -c "import pandas as pd; t = pd.read_csv('$W/microbench_fp8.csv'); print(int((t.weight_dtype == 'fp8-w8a8').sum()))")
echo "run.sh: $have of $want w8a8 points in the table"
# each step once (a later call skips what an earlier one finished), and only with its 240 s left
# in the call (CALL_S, the call's limit)
left() { [ $(( ${CALL_S:-590} - SECONDS )) -ge 250 ]; }
if [ "$have" -ge "$want" ] && [ ! -f /tmp/w/check/picks_check.csv ] && left; then
    timeout 240 python3 -m deamoe bench picks-check /tmp/w/check --table "$W/microbench_fp8.csv" --all 2>&1 | tail -4
fi
if [ "$have" -ge "$want" ] && [ ! -f /tmp/w/peer/vllm_peer.csv ] && left; then
    mkdir -p /tmp/w/tab && cp reports/measured/h200/microbench.csv "$W/microbench_fp8.csv" /tmp/w/tab/
    points=$(for m in ${models//,/ }; do for b in 4 16 64 128; do printf '%s:%s ' "$m" "$b"; done; done)
    # shellcheck disable=SC2086  # one argument per point
    timeout 240 python3 -m deamoe bench peer run /tmp/w/peer $points --weight-dtype fp8-w8a8 \
        --table /tmp/w/tab/microbench.csv 2>&1 | tail -12
fi
if [ "$have" -ge "$want" ] && ! grep -qs "^fp8 check:" /tmp/w/fp8check.log && [ "${FP8_CHECK:-1}" = 1 ] && left; then
    # the battery and stream options on '-pq' tiles too (parts battery-pq, stream-pq); its CSV
    # is written after each precision, so the last line of the log says whether it finished
    timeout 240 python3 -m deamoe bench fp8-check /tmp/w/fp8check --weight-dtype fp8-w8a8 \
        --models "$models" --kernel .peer/vllm_fused_moe.py > /tmp/w/fp8check.log 2>&1
    tail -4 /tmp/w/fp8check.log
fi
echo "run.sh: done at ${SECONDS} s"
tar czf "$out/fp8.tar.gz" -C /tmp/w --exclude=tab --exclude='*.lock' . && echo "run.sh: /tmp/w -> fp8.tar.gz"
