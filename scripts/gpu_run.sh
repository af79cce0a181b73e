#!/usr/bin/env bash
# Run gpu-profile targets on a bare GPU machine that has torch/triton/transformers but not the
# workflow's other packages, and collect the small result tables.
#
#   bash scripts/gpu_run.sh OUT_DIR TARGET [TARGET ...] [-- extra snakemake args]
#   bash scripts/gpu_run.sh OUT_DIR --stage      # unpack the carried corpus part, nothing else
#
# Before the run, on a machine with the package registries: `bash scripts/gpu_wheels.sh` makes
#   .whl/        wheels of what the GPU machine lacks (snakemake, lm-eval, ...), installed with
#                --no-deps into /tmp/site (nothing outside /tmp is touched; a warm machine that
#                has them already skips the install)
#   .gpu_data/corpus-<i>.tar.xz, corpus.tsv   the training text in parts that fit one call each,
#                unpacked to where data.files points (../shared/data/corpus/...); a run starts only
#                when every book of corpus.tsv is there, so the calls carrying the parts follow
#                each other while the machine is warm (gpu_wheels.sh prints them)
# Without pulp (gpu_wheels.sh leaves its 16 MB out) Snakemake schedules greedily.
# Rows record the commit the tree came from: set DEAMOE_GIT_SHA to the local commit the sent tree
# matches (the machine's copy may carry no .git, or an older one: then 'unknown' or
# '<sha>+uncommitted').
# The small tables (results/**/*.csv|json) go to OUT_DIR/results.tar.gz and the logs to
# OUT_DIR/logs.tar.gz, whether or not snakemake succeeded.  results/ (token shards, checkpoints,
# resume states) stays on the machine: a call within 30 s of the last continues its runs.
set -uo pipefail
source "$(dirname "$0")/gpu_site.sh"
usage="usage: gpu_run.sh OUT_DIR TARGET [TARGET ...] [-- snakemake args] | gpu_run.sh OUT_DIR --stage"
given=${1:?$usage}
[[ "$given" != -* ]] || { echo "gpu_run: OUT_DIR comes first, got '$given' ($usage)" >&2; exit 2; }
out=$(gpu_abspath "$given")   # the caller's folder: the script runs in the repository root
cd "$(dirname "$0")/.."
shift
targets=(); extra=(); stage=0
while [ $# -gt 0 ]; do
    case $1 in
        --) shift; extra=("$@"); break ;;
        --stage) stage=1 ;;
        # else Snakemake would be handed it as an option after the setup (wheels, corpus, MPS)
        -*) echo "gpu_run: unknown option '$1' (Snakemake's options go after --: $usage)" >&2; exit 2 ;;
        # an unset variable ("$TARGET"): else handed to Snakemake after the setup
        "") echo "gpu_run: an empty target after OUT_DIR '$given' ($usage)" >&2; exit 2 ;;
        *) targets+=("$1") ;;
    esac
    shift
done
[ $stage = 1 ] || [ ${#targets[@]} -gt 0 ] || {
    echo "gpu_run: name at least one target after OUT_DIR '$given', or --stage ($usage)" >&2; exit 2; }
[ $stage = 0 ] || [ ${#targets[@]} = 0 ] || {
    echo "gpu_run: --stage unpacks the corpus and runs nothing; targets (${targets[*]}) go in the next call" >&2
    exit 2; }
# at most 9 digits: bash's test cannot compare a longer number, and the limit would be dropped
[[ "${GPU_RUN_LIMIT:-0}" =~ ^[0-9]{1,9}$ ]] || {
    echo "gpu_run: GPU_RUN_LIMIT='$GPU_RUN_LIMIT' must be a whole number of seconds below 10^9 (0: no limit)" >&2
    exit 2; }
[[ "${GPU_MPS:-1}" =~ ^[01]$ ]] || { echo "gpu_run: GPU_MPS='$GPU_MPS' must be 0 or 1" >&2; exit 2; }
# rows record it as given: anything but a sha was found only when the results were read
[ -z "${DEAMOE_GIT_SHA:-}" ] || gpu_sha_ok gpu_run || exit 2
# no user file replaced, checked before any work (--stage writes nothing there)
[ $stage = 1 ] || gpu_claim "$out" results.tar.gz logs.tar.gz || exit 2
start=$(date +%s)
for part in .gpu_data/corpus-*.tar.xz; do
    [ -f "$part" ] || continue
    stamp="/tmp/.deamoe-unpacked-$(basename "$part")-$(stat -c %s "$part")"
    [ -e "$stamp" ] && continue
    xz -dc -T0 "$part" | tar -P -xf - && touch "$stamp" || { echo "gpu_run: could not unpack $part" >&2; exit 1; }
    echo "gpu_run: unpacked $part"
done
if [ -f .gpu_data/corpus.tsv ]; then  # every book there, at its size: else name what is missing
    missing=$(awk -F'\t' '{ cmd = "stat -c %s \"" $1 "/" $2 "\" 2>/dev/null"; size = ""; cmd | getline size;
                            close(cmd); if (size != $3) n++ } END { print n + 0 }' .gpu_data/corpus.tsv)
    total=$(wc -l < .gpu_data/corpus.tsv)
    if [ $stage = 1 ]; then
        echo "gpu_run: staged; $((total - missing)) of $total books of corpus.tsv here after $(( $(date +%s) - start )) s"
        exit 0
    fi
    if [ "$missing" -gt 0 ]; then
        echo "gpu_run: $missing of $total books of .gpu_data/corpus.tsv are missing; carry the other corpus parts first" \
             "(calls within 30 s of each other: scripts/gpu_wheels.sh prints them)" >&2
        exit 2
    fi
elif [ $stage = 1 ]; then
    echo "gpu_run: --stage: no .gpu_data/corpus.tsv carried" >&2; exit 2
fi
gpu_site || exit 1
echo "gpu_run: setup $(( $(date +%s) - start )) s; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
# GPU_RUN_LIMIT=SECONDS stops Snakemake (SIGINT: running jobs are cancelled and marked incomplete;
# a training run keeps its last periodic checkpoint and resumes from it on the next call) in time
# for the tables below to be collected, e.g. inside a lease of fixed length.
python3 -c "import pulp" 2>/dev/null || extra=(--scheduler greedy "${extra[@]}")
# Runs sharing the GPU go through CUDA's Multi-Process Service, so their kernels run side by side
# instead of taking turns (small models' steps are launch-bound): nine small runs trained about
# 1.3-1.7x faster together with it (docs/quality-gap.md).  GPU_MPS=0 turns it off; where the
# daemon cannot start, the runs take turns as without it.
if [ "${GPU_MPS:-1}" = 1 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/deamoe-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/deamoe-mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d 2>/dev/null || [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ]; then
        echo "gpu_run: CUDA MPS on"
    else
        echo "gpu_run: nvidia-cuda-mps-control could not start; runs take turns on the GPU" >&2
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
fi
limiter=(); [ "${GPU_RUN_LIMIT:-0}" -gt 0 ] && limiter=(timeout --signal=INT --kill-after=20 "$GPU_RUN_LIMIT")
# A Snakemake killed (SIGKILL: the limit's SIGINT not obeyed within 20 s while its jobs stopped)
# leaves its lock, and the next call -- the continuation -- failed with "Directory cannot be
# locked".  Its jobs died with it (timeout signals the whole process group), so the lock is stale:
# this script's own Snakemake took it, and `--unlock` lifts it before the continuation runs.
killed=.snakemake/gpu_run-killed
if [ -e "$killed" ]; then
    python3 -m snakemake --workflow-profile workflow/profiles/gpu --unlock "${targets[@]}" >/dev/null 2>&1 \
        && rm -f "$killed" && echo "gpu_run: lifted the lock the last call's killed Snakemake left"
fi
PYTHONUNBUFFERED=1 "${limiter[@]}" python3 -m snakemake --workflow-profile workflow/profiles/gpu "${targets[@]}" "${extra[@]}"
rc=$?
[ $rc != 137 ] || { mkdir -p .snakemake && touch "$killed"; }
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
echo "gpu_run: snakemake exit $rc after $(( $(date +%s) - start )) s"
# Each archive is packed under a temporary name and renamed when whole: a call cut short while
# packing leaves no truncated archive under the name its results are fetched by.
trap 'rm -f "$out/.results.tar.gz.partial" "$out/.logs.tar.gz.partial"' EXIT
pack() {  # pack NAME TAR-ARGS...
    local name=$1; shift
    tar czf "$out/.$name.partial" "$@" 2>/dev/null
    mv -f "$out/.$name.partial" "$out/$name"
}
# the small tables only (checkpoints and token shards stay on the machine)
find results -type f \( -name '*.csv' -o -name '*.json' \) -size -16M -print0 2>/dev/null \
    | pack results.tar.gz --null -T -
pack logs.tar.gz logs .snakemake/log
exit $rc
