"""Does compiling the MoE layers first (a recompile of the same layer code for DeaMoE) break
DeaMoE's compiled fast path with the Triton slot-sum op?"""
import sys, time
import torch, torch._dynamo
sys.path.insert(0, "tests/model")
import deamoe.model.mix_rows as mr
from test_fast_ffn import _bf16_curve

OP = mr._MIX_OP
for name, auto_dynamic, op_on in [("A", True, True), ("B", False, True), ("C", True, False)]:
    torch._dynamo.reset()
    torch._dynamo.config.automatic_dynamic_shapes = auto_dynamic
    mr._MIX_OP = OP if op_on else None
    t = time.time()
    m = _bf16_curve("moe", "fast", True, 30)
    d = _bf16_curve("deamoe", "fast", True, 200)
    print(f"{name} auto_dynamic={auto_dynamic} op={op_on}: moe {m[-5:].mean():.3f}; deamoe {d[:10].mean():.3f} -> {d[-10:].mean():.3f} ({time.time()-t:.0f}s)", flush=True)
