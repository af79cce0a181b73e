#!/usr/bin/env bash
# Prepare what scripts/gpu_run.sh carries to a bare GPU machine (no package index, no corpus):
#
#   bash scripts/gpu_wheels.sh [train|eval|test]    # after scripts/setup.sh, with the registries
#
#   .whl/            Python 3.12 x86-64 wheels of the workflow's packages at the versions .venv
#                    holds, less what the GPU image already has (GPU_IMAGE_HAS below): `train`
#                    Snakemake's closure (training and the joins), `eval` (the default) also
#                    lm-eval's (evaluation), `test` also pytest (the GPU tests)
#   .gpu_data/corpus-<i>.tar.xz + corpus.tsv
#                    the gpu profile's training text (data.files: both Gutenberg folders), split
#                    into parts that each fit one device call (64 MiB with the working tree; the
#                    last part also beside .whl/), and the list of its books (folder, file,
#                    bytes) that gpu_run.sh checks the unpacked corpus against
#
# Both folders are git-ignored.  The calls that carry the parts follow each other while the
# machine stays warm (the corpus is unpacked outside the repository, where it stays):
#   call 1..n-1: carry [".gpu_data/corpus-<i>.tar.xz", ".gpu_data/corpus.tsv"]
#                bash scripts/gpu_run.sh $OUT --stage
#   call n:      carry [".gpu_data/corpus-<n>.tar.xz", ".gpu_data/corpus.tsv", ".whl"]
#                bash scripts/gpu_run.sh $OUT TARGET ...
# (this script prints them).  GPU_CORPUS_BYTES=N packs only the first N bytes' worth of whole
# books, in data.files order (run with `--config data="{max_bytes: N}"` then: the rows state the
# corpus they saw).  GPU_WHEELS_ONLY=1 makes .whl/ alone (a call that trains nothing: the GPU
# tests, the bench tools), leaving .gpu_data/ as it is.  The ILP scheduler's solver (pulp, 16 MB) is left out: gpu_run.sh runs
# Snakemake's greedy scheduler where pulp cannot be imported.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ $# -le 1 ] || {  # `gpu_wheels.sh train test` made the train set alone, the rest ignored
    echo "gpu_wheels: takes at most one argument, the wheel set (train, eval or test); got $#: $*" >&2; exit 2; }
set_name=${1:-eval}
case "$set_name" in
    train) packages="snakemake" ;;
    eval) packages="snakemake lm_eval" ;;
    test) packages="snakemake lm_eval pytest" ;;
    *) echo "gpu_wheels: unknown wheel set '$set_name' (train, eval or test)" >&2; exit 2 ;;
esac
# checked before any download: the corpus is packed last, after minutes of it
[[ "${GPU_CORPUS_BYTES:-0}" =~ ^[0-9]{1,15}$ ]] || {
    echo "gpu_wheels: GPU_CORPUS_BYTES='$GPU_CORPUS_BYTES' must be a whole number of bytes (0: the whole corpus)" >&2
    exit 2; }
[[ "${GPU_WHEELS_ONLY:-0}" =~ ^[01]$ ]] || {
    echo "gpu_wheels: GPU_WHEELS_ONLY='$GPU_WHEELS_ONLY' must be 0 or 1" >&2; exit 2; }
[ -x "$py" ] || { echo "gpu_wheels: no .venv; run scripts/setup.sh first" >&2; exit 2; }
# On the GPU image (torch 2.11 stack; pip list read there 2026-12-02): skipped, with what they need.
GPU_IMAGE_HAS="torch triton numpy pandas transformers tokenizers huggingface-hub safetensors accelerate
  sympy networkx filelock fsspec jinja2 markupsafe typing-extensions setuptools mpmath pyyaml regex tqdm
  requests packaging psutil pillow certifi idna urllib3 charset-normalizer python-dateutil pytz tzdata
  six hf-xet scipy scikit-learn joblib threadpoolctl peft protobuf pyarrow lxml xxhash aiohttp absl-py
  sacrebleu click tabulate wrapt attrs"
LEFT_OUT="pulp"
CARRY_LIMIT=67108864   # bytes a device call carries: working tree + carried paths
MARGIN=1500000         # for files the working tree gains before the calls
wheels_only=${GPU_WHEELS_ONLY:-0}
folders=(.whl); [ "$wheels_only" = 1 ] || folders+=(.gpu_data)
for d in "${folders[@]}"; do
    if [ -n "$(ls -A "$d" 2>/dev/null)" ]; then
        echo "gpu_wheels: $d/ is not empty; move it away first (this script writes only into empty folders)" >&2
        exit 2
    fi
done
pins=$("$py" - "$GPU_IMAGE_HAS $LEFT_OUT" $packages <<'PY'
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
PY
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
echo "gpu_wheels: $(ls .whl | wc -l) wheels ($set_name), $(du -sh .whl | cut -f1) in .whl/"
[ "$wheels_only" = 1 ] && exit 0

# The corpus: the gpu profile's data.files, whole books in order, split into parts by size
tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
wheels=$(du -cb .whl/* | tail -1 | cut -f1)
"$py" - "$tree" "$wheels" "$CARRY_LIMIT" "$MARGIN" "${GPU_CORPUS_BYTES:-0}" <<'PY'
import glob, lzma, os, subprocess, sys
import yaml
tree, wheels, limit, margin, cap = map(int, sys.argv[1:])
profile = yaml.safe_load(open("workflow/profiles/gpu/train-sections.yaml"))
books = [p for pattern in profile["data"]["files"] for p in sorted(glob.glob(pattern))]
if not books:
    sys.exit("gpu_wheels: no book of the gpu profile's data.files is here; .gpu_data/ not made")
if cap:  # the first `cap` bytes' worth of whole books
    kept, total = [], 0
    for b in books:
        if total >= cap:
            break
        kept.append(b); total += os.path.getsize(b)
    books = kept
os.makedirs(".gpu_data", exist_ok=True)
with open(".gpu_data/corpus.tsv", "w") as f:
    for b in books:
        f.write(f"{os.path.dirname(b)}\t{os.path.basename(b)}\t{os.path.getsize(b)}\n")
# Each book's compressed size, scaled to what a solid xz of many books gives (measured: 7% less)
def packed(b):
    with open(b, "rb") as f:
        return 0.93 * len(lzma.compress(f.read(), preset=6))
room_last = limit - tree - wheels - margin       # the last part travels beside the wheels
room = limit - tree - margin
parts, current, size = [], [], 0.0
for b in reversed(books):  # fill the last part first, then the staging parts before it
    s = packed(b)
    cap_now = room_last if not parts else room
    if current and size + s > 0.97 * cap_now:
        parts.append(current); current, size = [], 0.0
    current.append(b); size += s
parts.append(current)
parts = [list(reversed(p)) for p in reversed(parts)]
for i, part in enumerate(parts, 1):
    out = f".gpu_data/corpus-{i}.tar.xz"
    # -P keeps the paths as data.files gives them (../shared/...): gpu_run.sh unpacks them there
    tar = subprocess.Popen(["tar", "-P", "-cf", "-", *part], stdout=subprocess.PIPE)
    with open(out + ".partial", "wb") as f:
        subprocess.run(["xz", "-9", "-T0"], stdin=tar.stdout, stdout=f, check=True)
    tar.wait()
    os.replace(out + ".partial", out)
    got, allowed = os.path.getsize(out), (room_last if i == len(parts) else room)
    if got > allowed:
        sys.exit(f"gpu_wheels: {out} is {got} bytes, more than the {allowed} a call has room for; "
                 "set GPU_CORPUS_BYTES lower or move files out of the working tree")
    print(f"gpu_wheels: {out}: {len(part)} books, {sum(map(os.path.getsize, part)) / 1e6:.1f} MB of "
          f"text in {got / 2**20:.1f} MiB")
n = len(parts)
print(f"gpu_wheels: {len(books)} books in {n} part(s); one device call per part, each within 30 s of the last:")
for i in range(1, n):
    print(f"  carry [\".gpu_data/corpus-{i}.tar.xz\", \".gpu_data/corpus.tsv\"]: "
          "bash scripts/gpu_run.sh $OUT --stage")
print(f"  carry [\".gpu_data/corpus-{n}.tar.xz\", \".gpu_data/corpus.tsv\", \".whl\"]: "
      "bash scripts/gpu_run.sh $OUT TARGET ...")
PY
