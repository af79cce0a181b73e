"""GPU correctness of the current kernels at the check's tile (bf16, DeaMoE-7B shapes + small)."""

import torch

from deamoe.bench.knobs import joint_knobs, make_tiles
from deamoe.config import TABLE1
from deamoe.kernels.battery import Case, build_layer, check_case, small_shapes

shape = TABLE1["Baseline-7B"].deamoe
tiles = make_tiles(shape, joint_knobs(shape, "n128-k128-w4-s3", 16))
layer = build_layer(shape, "cuda", seed=3, dtype=torch.bfloat16)
rows = [check_case(Case("DeaMoE-7B", shape, t, p, seed=t), "cuda", torch.bfloat16, layer, tiles)
        for t, p in ((128, "random"), (77, "random"), (64, "same"), (64, "empty"))]
small = small_shapes()["deamoe-small"]
rows += [check_case(Case("deamoe-small", small, 256, "random", 1), "cuda", torch.bfloat16, None,
                    make_tiles(small, joint_knobs(small, "n128-k128-w4-s3", 16)))]
for r in rows:
    print(r)
print("GPU check:", "ok" if all(r["ok"] for r in rows) else "FAILED")
