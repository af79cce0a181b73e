#!/usr/bin/env bash
# Why does DeaMoE trail its baseline at the ladder's small size?  The gpu profile's DAG on extra
# ladder sizes (sweep.yaml: the small decoder at seed 0 with one setting changed, each a
# budget-matched baseline/DeaMoE pair on the full 1000-step schedule), all six runs side by side
# on one GPU, then perplexity.  Usage on the GPU machine (what scripts/gpu_run.sh needs beside it:
# .whl/ and .gpu_data/, see README "One GPU"):
#   bash experiments/small_gap/sweep.sh OUT_DIR [SIZE ...]      (default: every size of sweep.yaml)
# OUT_DIR gets gpu_run.sh's results.tar.gz and logs.tar.gz, and small_gap_runs.csv: the sizes'
# results/quality/<size>/runs.csv rows together.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: sweep.sh OUT_DIR [SIZE ...]}
shift
sweep=experiments/small_gap/sweep.yaml
sizes=("$@")
if [ ${#sizes[@]} -eq 0 ]; then
    mapfile -t sizes < <(python3 -c 'import sys, yaml; print(*yaml.safe_load(open(sys.argv[1]))["pretrain"]["sizes"], sep="\n")' "$sweep")
fi
targets=("${sizes[@]/#/quality_}")
# A --configfile on the command line replaces the profile's `configfile` list: name the profile's
# own files first so that the sweep's sizes are merged over the gpu profile, not over config.yaml.
bash scripts/gpu_run.sh "$out" "${targets[@]}" -- --configfile workflow/profiles/gpu/pipeline.yaml \
    workflow/profiles/gpu/train-sections.yaml "$sweep"
rc=$?
python3 - "$out/small_gap_runs.csv" "${sizes[@]}" <<'PY'
import csv, pathlib, sys
rows = []
for size in sys.argv[2:]:
    path = pathlib.Path("results/quality") / size / "runs.csv"
    if not path.is_file():
        print(f"sweep: {path} missing (not run)")
        continue
    rows += list(csv.DictReader(path.open()))
if rows:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(sys.argv[1], "w", newline="") as fh:
        w = csv.DictWriter(fh, keys); w.writeheader(); w.writerows(rows)
for r in rows:
    print(r["run"], "lr", r["lr"], "expert_init_scale", r.get("expert_init_scale"), "held-out", r["val_loss"])
PY
exit $rc
