#!/usr/bin/env bash
# Why does DeaMoE trail its baseline at the ladder's small size?  Six small-size runs side by side
# on one GPU, each the ladder's seed-0 run with one setting changed (learning rate; the
# load-balancing coefficient or method), full 1000-step schedule.  Usage on the GPU machine:
#   bash experiments/small_gap/sweep.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT_DIR}
bash scripts/gpu_run.sh "$out/data" results/data/meta.json || exit 1
export PYTHONPATH=$PWD/src:/tmp/site
python3 - <<'PY'
import copy, pathlib, yaml
base = yaml.safe_load(open("results/config.resolved.yaml"))
variants = {
    "baseline-lr1e-3": ("baseline", {"lr": 1.0e-3}, {}),
    "deamoe-lr1e-3": ("deamoe", {"lr": 1.0e-3}, {}),
    "baseline-lr4e-3": ("baseline", {"lr": 4.0e-3}, {}),
    "deamoe-lr4e-3": ("deamoe", {"lr": 4.0e-3}, {}),
    "deamoe-aux1e-3": ("deamoe", {}, {"aux_loss_coef": 1.0e-3}),
    "deamoe-bias": ("deamoe", {}, {"load_balance": "bias"}),
}
for name, (model, size_kv, model_kv) in variants.items():
    cfg = copy.deepcopy(base)
    cfg["pretrain"]["sizes"]["small"].update(size_kv)
    cfg["model"].update(model_kv)
    d = pathlib.Path("exp") / name
    d.mkdir(parents=True, exist_ok=True)
    yaml.safe_dump(cfg, open(d / "config.yaml", "w"))
    (d / "run").write_text(f"pretrain-small-{model}-s0")
PY
for d in exp/*/; do
    n=$(basename "$d")
    python3 -m deamoe train --config "$d/config.yaml" --run "$(cat "$d/run")" --data results/data \
        --out "$d/out" > "$d/train.log" 2>&1 &
done
wait
python3 - "$out" <<'PY'
import json, pathlib, sys, csv
rows = []
for d in sorted(pathlib.Path("exp").iterdir()):
    s = d / "out" / "summary.json"
    row = {"variant": d.name}
    if s.exists():
        j = json.loads(s.read_text())
        row.update({k: v for k, v in j.items() if not isinstance(v, (dict, list))})
    rows.append(row)
keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "variant", k))
with open(pathlib.Path(sys.argv[1]) / "small_gap.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, keys); w.writeheader(); w.writerows(rows)
for r in rows:
    print(r["variant"], {k: r.get(k) for k in ("final_loss", "val_loss", "heldout_loss", "tokens_per_s") if k in r})
PY
grep -h "held-out" exp/*/train.log
