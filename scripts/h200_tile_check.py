"""GPU correctness of tile options (NOTES.md v31): every GEMM of both layers on each given tile.

usage: python scripts/h200_tile_check.py OUT_DIR TILE [TILE ...]   (CUDA) -> tile_battery.csv
For each tile: the battery's small shapes (1/37/256 tokens, three patterns; DeaMoE with its
routed and its dense department up-projection), then Qwen3-235B-A22B's Table 1 layers at 13
and 64 tokens (dense department GEMM on 64-row blocks), bf16 against the float32 reference
with buffers poisoned; then the layer step with the first tile (dense department GEMM on the
default 16-row blocks) captured in a CUDA graph and replayed twice against the eager step on
the default tiles.  A case that raises is a failed row with its error; one whose tile does not
fit that shape in shared memory (as the search skips it) gets fits = False and is left out of
the verdict.  Exits 1 if any case that fits fails.
"""

import sys
from pathlib import Path

import pandas as pd
import torch

from deamoe.bench.layer_step import ffn_step, graph_replay_rows, random_weights
from deamoe.config import table1_row
from deamoe.kernels.battery import PATTERNS, Case, build_layer, check_case, small_shapes
from deamoe.kernels.deamoe_decode import DeaMoETiles
from deamoe.kernels.fused_moe import MoETiles
from deamoe.kernels.grouped_gemm import TileConfig

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
TILES = [TileConfig.parse(t) for t in sys.argv[2:]]
MODEL = "Qwen3-235B-A22B"


def failed(case: str, kind: str, tokens: int, t, exc: Exception) -> dict:
    """The row of a case that raised; fits = False when the tile needs more shared memory."""
    return {"case": case, "kind": kind, "tokens": tokens, "dtype": "bfloat16",
            "rel_err": float("nan"), "finite": False, "tol": 1e-2, "ok": False, "tile": t.name,
            "fits": type(exc).__name__ != "OutOfResources",
            "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}


def checked(case, t, **kw) -> dict:
    """check_case's row, or failed()'s; the other cases still run."""
    try:
        return {**check_case(case, "cuda", torch.bfloat16, **kw), "tile": t.name, "fits": True}
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {**failed(case.name, case.shape.kind, case.tokens, t, exc),
                "pattern": case.pattern}


def all_tiles(shape, t, dense=True, block_m=0):
    if shape.kind == "deamoe":
        return DeaMoETiles(dept_up=t, expert_up=t, expert_down=t, dept_down=t,
                           dense_dept_up=dense, dense_block_m=block_m)
    return MoETiles(w13=t, w2=t)


rows = []
for t in TILES:
    for name, shape in small_shapes().items():
        for seed, tokens in enumerate((1, 37, 256)):
            for pattern in PATTERNS:
                rows.append(checked(Case(name, shape, tokens, pattern, seed), t,
                                    tiles=all_tiles(shape, t, dense=seed != 1)))
row = table1_row(MODEL)
for shape in (row.baseline, row.deamoe):
    layer = build_layer(shape, "cuda", seed=11, dtype=torch.bfloat16)
    for t in TILES:
        for case in (Case(MODEL, shape, 13, "random", 33), Case(MODEL, shape, 64, "empty", 2)):
            rows.append(checked(case, t, layer=layer, tiles=all_tiles(shape, t, block_m=64)))
    del layer
    torch.cuda.empty_cache()
shape = row.deamoe
w = random_weights(shape, "cuda", seed=5)
x = torch.randn(64, shape.h, device="cuda", dtype=torch.bfloat16)
ref = ffn_step(shape, w, x, tiles=DeaMoETiles(dense_dept_up=True)).float()
try:
    rows += [{**r, "tile": TILES[0].name, "fits": True} for r in graph_replay_rows(
        shape, w, x, all_tiles(shape, TILES[0]), ref, replays=2, case=MODEL)]
except Exception as exc:  # noqa: BLE001 - reported in the table
    rows.append(failed(f"{MODEL} graph", "deamoe", 64, TILES[0], exc))
bat = pd.DataFrame(rows)
bat.to_csv(out / "tile_battery.csv", index=False)
fit = bat[bat.fits]
print(f"tile battery: {int(fit.ok.sum())}/{len(fit)} ok where the tile fits, max rel err "
      f"{fit.rel_err.max():.2e}; {int((~bat.fits).sum())} cases do not fit", flush=True)
if not fit.ok.all():
    print(fit[~fit.ok].to_string(index=False))
    sys.exit(1)
