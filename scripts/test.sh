#!/usr/bin/env bash
# Set everything up (scripts/setup.sh) and run the whole test suite: unit tests, the dry run of
# the whole DAG and the end-to-end run of a reduced config through every stage (slow tests
# included; with DEAMOE_SLURM_TEST=1 the end-to-end run goes through the SLURM
# profile on a one-node cluster started for it; GPU tests skip themselves without CUDA).  Extra
# arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slow"      # the fast part only
# A test path is taken relative to the caller's folder (`cd tests && bash ../scripts/test.sh
# test_io.py`); one that is not there, relative to the repository root (`tests/test_io.py`).
set -uo pipefail
source "$(dirname "$0")/gpu_site.sh"   # (gpu_abspath)
args=(); value=0
for arg in "$@"; do  # made absolute before the cd below; an option's value (-k EXPR) as it is
    [ $value = 0 ] && [[ "$arg" != -* ]] && [ -e "${arg%%::*}" ] && arg=$(gpu_abspath "$arg")
    value=0; [[ "$arg" =~ ^(-[kmpoWr]|--tb|--maxfail|--durations)$ ]] && value=1
    args+=("$arg")
done
cd "$(dirname "$0")/.."

[[ "${DEAMOE_SLURM_TEST:-0}" =~ ^[01]$ ]] || {  # anything else: a run without the cluster, after setup
    echo "test.sh: DEAMOE_SLURM_TEST='$DEAMOE_SLURM_TEST' must be 0 or 1" >&2; exit 2; }
if [ "${DEAMOE_SLURM_TEST:-}" = 1 ]; then  # the SLURM test's packages, fetched while setup runs
    "${PYTHON:-python3.11}" tests/slurm_cluster.py & slurm_packages=$!
fi
bash scripts/setup.sh || exit $?
if [ -n "${slurm_packages:-}" ]; then wait "$slurm_packages"; fi  # (the test skips if they failed)
.venv/bin/python -m pytest -ra --durations=25 "${args[@]}"   # the 25 slowest: where CI time goes
rc=$?
if [ "$rc" -eq 5 ]; then  # pytest: no test collected -- never a pass
    echo "test.sh: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
