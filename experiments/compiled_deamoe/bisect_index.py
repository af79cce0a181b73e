"""One index function kept out of inductor per process (argv[1]); stuck-run count over 5 seeds."""
import sys, time
import torch
sys.path.insert(0, "experiments/compiled_deamoe")
import deamoe.model.fast_ffn as ff
from escape import curve

name = sys.argv[1]
setattr(ff, name, torch.compiler.disable(getattr(ff, name)))
t = time.time()
finals = [curve("fast", True, 3e-3, seed)[-10:].mean().item() for seed in range(1, 6)]
print(f"{name} eager: finals {[round(f, 3) for f in finals]}, stuck {sum(f > 2 for f in finals)}/5 ({time.time() - t:.0f}s)", flush=True)
