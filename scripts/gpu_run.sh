#!/usr/bin/env bash
# Run gpu-profile targets on a bare GPU machine that has torch/triton/transformers but not the
# workflow's other packages, and collect the small result tables.
#
#   bash scripts/gpu_run.sh OUT_DIR TARGET [TARGET ...] [-- extra snakemake args]
#
# Before the run, on a machine with the package registries: `bash scripts/gpu_wheels.sh` makes
#   .whl/        wheels of what the GPU machine lacks (snakemake, lm-eval, datasets, ...), installed
#                with --no-deps into /tmp/site (nothing outside /tmp is touched)
#   .gpu_data/*.tar.xz   the training text, unpacked to where data.files points
#                (../shared/data/corpus/gutenberg/ in the gpu profile) unless already there
# Without pulp (gpu_wheels.sh leaves its 16 MB out) Snakemake schedules greedily.
# The small tables (results/**/*.csv|json) go to OUT_DIR/results.tar.gz and the logs to
# OUT_DIR/logs.tar.gz, whether or not snakemake succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_run.sh OUT_DIR TARGET [TARGET ...] [-- snakemake args]}
shift
targets=(); extra=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
    targets+=("$1"); shift
done
[ ${#targets[@]} -gt 0 ] || { echo "gpu_run: name at least one target" >&2; exit 2; }
mkdir -p "$out"
start=$(date +%s)
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
corpus=../shared/data/corpus/gutenberg
if compgen -G ".gpu_data/*.tar.xz" >/dev/null && [ ! -d "$corpus" ]; then
    mkdir -p "$corpus.partial" && for f in .gpu_data/*.tar.xz; do tar xJf "$f" -C "$corpus.partial"; done \
        && mv "$corpus.partial" "$corpus" || exit 1
fi
echo "gpu_run: setup $(( $(date +%s) - start )) s; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
# GPU_RUN_LIMIT=SECONDS stops Snakemake (SIGINT: running jobs are cancelled and marked incomplete)
# in time for the tables below to be collected, e.g. inside a lease of fixed length.
python3 -c "import pulp" 2>/dev/null || extra=(--scheduler greedy "${extra[@]}")
limiter=(); [ "${GPU_RUN_LIMIT:-0}" -gt 0 ] && limiter=(timeout --signal=INT --kill-after=20 "$GPU_RUN_LIMIT")
PYTHONUNBUFFERED=1 "${limiter[@]}" python3 -m snakemake --workflow-profile workflow/profiles/gpu "${targets[@]}" "${extra[@]}"
rc=$?
echo "gpu_run: snakemake exit $rc after $(( $(date +%s) - start )) s"
# the small tables only (checkpoints and token shards stay on the machine)
find results -type f \( -name '*.csv' -o -name '*.json' \) -size -4M -print0 2>/dev/null \
    | tar czf "$out/results.tar.gz" --null -T - 2>/dev/null
tar czf "$out/logs.tar.gz" logs .snakemake/log 2>/dev/null
exit $rc
