"""Which part of DeaMoE's fast path does inductor get wrong?  Stuck-run counts (6 seeds) with one
part kept out of inductor (torch.compiler.disable: a graph break, eager there)."""
import sys, time
import torch, torch._dynamo
sys.path.insert(0, "experiments/compiled_deamoe")
import deamoe.model.fast_ffn as ff
from escape import curve

orig = {n: getattr(ff, n) for n in ("department_slots", "_department_rows", "sort_groups", "_slot_sum", "_Expand", "_Permute")}
D = torch.compiler.disable


class ExpandEager:
    apply = staticmethod(D(orig["_Expand"].apply))


class PermuteEager:
    apply = staticmethod(D(orig["_Permute"].apply))


variants = [
    ("index-math eager", {"department_slots": D(orig["department_slots"]), "_department_rows": D(orig["_department_rows"]),
                          "sort_groups": D(orig["sort_groups"])}),
    ("slot-sum eager", {"_slot_sum": D(orig["_slot_sum"])}),
    ("expand eager", {"_Expand": ExpandEager}),
    ("permute eager", {"_Permute": PermuteEager}),
]
for name, patch in variants:
    torch._dynamo.reset()
    for n, f in orig.items():
        setattr(ff, n, patch.get(n, f))
    t = time.time()
    finals = [curve("fast", True, 3e-3, seed)[-10:].mean().item() for seed in range(1, 7)]
    print(f"{name}: finals {[round(f, 3) for f in finals]}, stuck {sum(f > 2 for f in finals)}/6 ({time.time() - t:.0f}s)", flush=True)
