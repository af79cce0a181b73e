"""Copy a device run's small result tables into reports/measured/h200/ (committed).

usage: python scripts/import_h200.py DEVICE_OUT_DIR [DEVICE_OUT_DIR ...] [--sha GIT_SHA]
The device copy of the tree has no .git, so its provenance says git_sha "unknown": the sha of
the commit that was sent (--sha, default HEAD) is filled in.  Several directories are the
parts of one run split over device calls (MODELS=... in scripts/h200_microbench.sh, NOTES.md
v25): their microbench.csv / stages.csv rows are concatenated (each row keeps its own date,
roofline and git_sha), battery / decode tables come from the part that has them, and
status.json lists every part's status.
"""

import argparse
import json
import subprocess
from pathlib import Path

import pandas as pd

ap = argparse.ArgumentParser()
ap.add_argument("dirs", nargs="+", type=Path)
ap.add_argument("--sha")
args = ap.parse_args()
sha = args.sha or subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
dst = Path("reports/measured/h200")
dst.mkdir(parents=True, exist_ok=True)


def with_sha(df):
    if "git_sha" in df:
        df["git_sha"] = df["git_sha"].astype(str).replace("unknown", sha)
    return df


for name in ("microbench.csv", "stages.csv", "decode_tpot.csv", "battery.csv"):
    parts = [pd.read_csv(d / name) for d in args.dirs if (d / name).exists()]
    if parts:
        with_sha(pd.concat(parts, ignore_index=True)).to_csv(dst / name, index=False)
statuses = []
for d in args.dirs:
    if (d / "status.json").exists():
        s = json.loads((d / "status.json").read_text())
        statuses.append({**s, "git_sha": sha if s.get("git_sha") == "unknown" else s.get("git_sha")})
if statuses:
    merged = dict(statuses[0]) if len(statuses) == 1 else {
        "status": "ok" if all(s.get("status") == "ok" for s in statuses) else "partial",
        **{k: statuses[0][k] for k in ("git_sha", "device", "python", "torch", "triton")
           if k in statuses[0]},
        "date": max(s.get("date", "") for s in statuses),
        "parts_by_call": [{"date": s.get("date"), "parts": s.get("parts", {})} for s in statuses]}
    (dst / "status.json").write_text(json.dumps(merged, indent=2) + "\n")
roofs = [json.loads((d / "roofline.json").read_text()) for d in args.dirs
         if (d / "roofline.json").exists()]
if roofs:
    roof = dict(roofs[0])
    if roof.get("git_sha") == "unknown":
        roof["git_sha"] = sha
    if len(roofs) > 1:  # each microbench row carries its own call's peak_read_tbps
        roof["peak_read_tbps_by_call"] = [r.get("peak_read_tbps") for r in roofs]
    (dst / "roofline.json").write_text(json.dumps(roof, indent=2) + "\n")
print("imported", sorted(p.name for p in dst.iterdir() if p.is_file()))
