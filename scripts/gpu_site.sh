# Sourced by the GPU scripts (gpu_run.sh, h200_microbench.sh): install the carried wheels (.whl/,
# made by scripts/gpu_wheels.sh) with --no-deps into /tmp/site -- nothing outside /tmp is touched;
# a warm machine that has them already skips the install -- and put /tmp/site and src/ on
# PYTHONPATH.  Returns 1 (with one line on stderr) when the install fails or a package every
# command needs (jsonschema: config validation) is still missing.
# gpu_claim DIR NAME...: before any work, the files DIR/NAME a script writes itself (logs,
# archives) are claimed as deamoe's outputs (deamoe.io: DIR no link, no file, no folder of user
# files; an existing DIR/NAME only one deamoe wrote); returns 2 with one line on stderr if not.
# gpu_abspath PATH: PATH made absolute against the working directory (a script that then changes
# to the repository root keeps the caller's relative paths meaning what they meant).
gpu_abspath() {
    case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}
# gpu_sha_ok SCRIPT: whether DEAMOE_GIT_SHA (the commit the rows record) is a commit's sha, by
# the rule every python -m deamoe command applies (deamoe.argtypes.commit_sha); if not, one line
# on stderr and a nonzero status -- checked before any work.
gpu_sha_ok() {
    PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import argparse, os, sys
from deamoe.argtypes import commit_sha
try:
    commit_sha(os.environ.get("DEAMOE_GIT_SHA", ""))
except argparse.ArgumentTypeError as exc:
    sys.exit(f"{sys.argv[1]}: DEAMOE_GIT_SHA {exc}")' "$1"
}
gpu_claim() {
    PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import sys
from deamoe.errors import run_reporting
from deamoe.io import check_outputs
from deamoe.ownership import record_output
def claim(folder, *names):
    check_outputs(files=[f"{folder}/{n}" for n in names], folders=[folder])
    for name in names:
        record_output(f"{folder}/{name}")
sys.exit(run_reporting(claim, *sys.argv[1:]))' "$@"
}
gpu_site() {
    if compgen -G ".whl/*.whl" >/dev/null; then
        local wanted
        wanted=$(ls .whl | sha256sum | cut -c1-16)
        if [ "$(cat /tmp/site/.deamoe-wheels 2>/dev/null)" != "$wanted" ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site .whl/*.whl && echo "$wanted" > /tmp/site/.deamoe-wheels || {
                echo "gpu_site: could not install the carried wheels (.whl/) into /tmp/site" >&2; return 1; }
        fi
    fi
    [ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
    python3 -c "import jsonschema" 2>/dev/null || {
        echo "gpu_site: jsonschema is missing on this machine: carry .whl (bash scripts/gpu_wheels.sh) with this call" >&2
        return 1; }
}
