"""Copy a device run's small result tables into reports/measured/h200/ (committed).

usage: python scripts/import_h200.py DEVICE_OUT_DIR [GIT_SHA]
The device copy of the tree has no .git, so its provenance says git_sha "unknown": the sha of
the commit that was sent (argument, default HEAD) is filled in.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

src = Path(sys.argv[1])
sha = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
    ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
dst = Path("reports/measured/h200")
dst.mkdir(parents=True, exist_ok=True)
for name in ("microbench.csv", "decode_tpot.csv", "battery.csv"):
    if (src / name).exists():
        df = pd.read_csv(src / name)
        if "git_sha" in df:
            df["git_sha"] = df["git_sha"].replace("unknown", sha)
        df.to_csv(dst / name, index=False)
for name in ("roofline.json", "status.json"):
    if (src / name).exists():
        d = json.loads((src / name).read_text())
        if d.get("git_sha") == "unknown":
            d["git_sha"] = sha
        (dst / name).write_text(json.dumps(d, indent=2) + "\n")
print("imported", sorted(p.name for p in dst.iterdir()))
