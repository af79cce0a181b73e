# Sourced by the GPU scripts (gpu_run.sh, h200_microbench.sh): install the carried wheels (.whl/,
# made by scripts/gpu_wheels.sh) with --no-deps into /tmp/site -- nothing outside /tmp is touched;
# a warm machine that has them already skips the install -- and put /tmp/site and src/ on
# PYTHONPATH.  Returns 1 (with one line on stderr) when the install fails or a package every
# command needs (jsonschema: config validation) is still missing.
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
