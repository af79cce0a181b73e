#!/usr/bin/env bash
# Prepare what scripts/gpu_run.sh carries to a bare GPU machine (no package index, no corpus):
#
#   bash scripts/gpu_wheels.sh            # after scripts/setup.sh, on a machine with the registries
#
#   .whl/                 Python 3.12 x86-64 wheels of the workflow's packages (snakemake, lm-eval and
#                         what they need, pytest for the GPU tests) at the versions .venv holds,
#                         less what the GPU image already has (GPU_IMAGE_HAS below)
#   .gpu_data/gutenberg.tar.xz   the gpu profile's training text (data.files), if it is here
#
# Both folders are git-ignored; a device call names them in its carry list (64 MiB in all).  The
# ILP scheduler's solver (pulp, 16 MB) is left out: gpu_run.sh runs Snakemake's greedy scheduler
# where pulp cannot be imported.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ -x "$py" ] || { echo "gpu_wheels: no .venv; run scripts/setup.sh first" >&2; exit 2; }
# On the GPU image (torch 2.11 stack; pip list read there 2026-12-02): skipped, with what they need.
GPU_IMAGE_HAS="torch triton numpy pandas transformers tokenizers huggingface-hub safetensors accelerate
  sympy networkx filelock fsspec jinja2 markupsafe typing-extensions setuptools mpmath pyyaml regex tqdm
  requests packaging psutil pillow certifi idna urllib3 charset-normalizer python-dateutil pytz tzdata
  six hf-xet scipy scikit-learn joblib threadpoolctl peft protobuf pyarrow lxml xxhash aiohttp absl-py
  sacrebleu click tabulate wrapt attrs"
LEFT_OUT="pulp"
if [ -n "$(ls -A .whl 2>/dev/null)" ]; then
    echo "gpu_wheels: .whl/ is not empty; move it away first (two versions of a package stop the install there)" >&2
    exit 2
fi
pins=$("$py" - "$GPU_IMAGE_HAS $LEFT_OUT" snakemake lm_eval pytest <<'EOF'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
skip = {norm(n) for n in sys.argv[1].split()}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
todo, pins = list(sys.argv[2:]), {}
while todo:
    name = norm(todo.pop())
    if name in pins or name in skip:
        continue
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        sys.exit(f"gpu_wheels: {name} is needed but not installed in .venv")
    pins[name] = dist.version
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            todo.append(req.name)
print(" ".join(f"{n}=={v}" for n, v in sorted(pins.items())))
EOF
)
mkdir -p .whl
platforms=()
for p in manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34; do
    platforms+=(--platform "${p}_x86_64")
done
for pin in $pins; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl "$pin" 2>/dev/null \
        || "$py" -m pip wheel -q --no-deps -w .whl "$pin"   # sdist only: a pure-Python wheel built here
done
echo "gpu_wheels: $(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
corpus=../shared/data/corpus/gutenberg
if [ -d "$corpus" ]; then
    mkdir -p .gpu_data
    tmp=.gpu_data/gutenberg.tar.xz.partial
    trap 'rm -f "$tmp"' EXIT
    (cd "$corpus" && tar cf - 0*.txt) | xz -6 -T0 > "$tmp" && mv "$tmp" .gpu_data/gutenberg.tar.xz
    echo "gpu_wheels: $(du -sh .gpu_data | cut -f1) in .gpu_data/"
else
    echo "gpu_wheels: no $corpus here; .gpu_data/ not made (the GPU machine then needs the corpus)"
fi
