"""Checks of the L2 prefetch (l2_prefetch.py, deamoe_decode.PREFETCH_BLOCKS; NOTES.md v46).

usage: python scripts/h200_l2_prefetch_check.py OUT_DIR [--read-only]
1. Correctness: the battery's DeaMoE cases (five Table 1 shapes, 1 / 4 / 13 / 64 tokens, bf16,
   poisoned buffers, fp32 reference) on dense_dept_up + 4 split launches, without and with the
   prefetch -> l2_prefetch_check.csv (skipped with --read-only).
2. Does it reach L2: after a 1 GiB read (L2 flushed), prefetch the first 4 experts of a
   Qwen3-shaped expert_gate (or not; both L2 policies; 64 KB / 256 KB / 1 MB per program), wait
   ~25 or ~100 us, then time one streaming read of those 4 experts (18.9 MB) with events; the
   prefetch launch is timed too; "reread" reads the 4 experts just before instead (what an
   L2-resident read costs) -> l2_prefetch_read.csv.  CUDA, sm_90+ only.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.microbench import module_switches
from deamoe.config import TABLE1
from deamoe.kernels.align import AlignSpec, align
from deamoe.kernels.battery import Case, build_layer, check_case
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.l2_prefetch import available, prefetch_groups
from deamoe.kernels.stream_read import stream_read

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
if not available("cuda"):
    sys.exit("h200_l2_prefetch_check: needs an sm_90+ CUDA GPU")
tiles = DeaMoETiles(dense_dept_up=True, split_launches=4)
rows = []
for model, row in TABLE1.items() if "--read-only" not in sys.argv else ():
    shape = row.deamoe
    layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
    for t in (1, 4, 13, 64):
        case = Case(model, shape, t, "random", seed=30 + t)
        for blocks in (0, 4):
            with module_switches({"deamoe.kernels.deamoe_decode.PREFETCH_BLOCKS": blocks}):
                r = check_case(case, "cuda", torch.bfloat16, layer=layer, tiles=tiles)
            rows.append({**r, "prefetch_blocks": blocks})
            print(f"{model:16s} {t:4d} PREFETCH_BLOCKS={blocks} rel_err {r['rel_err']:.2e} "
                  f"{'ok' if r['ok'] else 'FAIL'}", flush=True)
    del layer
    torch.cuda.empty_cache()
if rows:
    pd.DataFrame(rows).to_csv(out / "l2_prefetch_check.csv", index=False)

big = torch.ones(1 << 29, dtype=torch.bfloat16, device="cuda")  # 1 GiB: evicts L2
wg = torch.randn(128, 1536, 1536, dtype=torch.bfloat16, device="cuda")
ids = torch.arange(4, dtype=torch.int64, device="cuda").view(4, 1)
(al,) = align(ids, AlignSpec(n_groups=128, block_m=16))
reads = []
MODES = {"none": None, "reread": "reread", "evict_last": (True, 256), "evict_normal": (False, 256),
         "evict_last_piece64k": (True, 64), "evict_last_piece1m": (True, 1024)}
for trial in range(25):
    for sleep_us in (25, 100):
        for mode, how in MODES.items():
            stream_read(big)
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            ev[0].record()
            if how == "reread":  # calibration: the same bytes read just before, so L2-resident
                stream_read(wg[:4])
            elif how is not None:
                with module_switches({"deamoe.kernels.l2_prefetch.PIECE": how[1] * 1024}):
                    prefetch_groups((wg,), al, 4, evict_last=how[0])
            ev[1].record()
            torch.cuda._sleep(2000 * sleep_us)  # ~1.98 GHz clock
            ev[2].record()
            stream_read(wg[:4])
            ev[3].record()
            torch.cuda.synchronize()
            if trial >= 5:
                reads.append({"mode": mode, "sleep_us": sleep_us,
                              "prefetch_us": ev[0].elapsed_time(ev[1]) * 1e3,
                              "read_us": ev[2].elapsed_time(ev[3]) * 1e3})
df = pd.DataFrame(reads)
df.to_csv(out / "l2_prefetch_read.csv", index=False)
print(df.groupby(["sleep_us", "mode"])[["prefetch_us", "read_us"]].median().round(2).to_string())
print("all ok" if all(r["ok"] for r in rows) else "SOME CASES FAILED")
