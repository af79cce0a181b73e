"""Stuck-run counts (final loss > 2 after 200 bf16 steps, 6 nudge seeds, lr 3e-3) for DeaMoE's
compiled fast path: as is; with every padding row multiplied (no undefined grouped_mm rows);
compiled with aot_eager (no inductor)."""
import sys, time
import torch, torch._dynamo
sys.path.insert(0, "experiments/compiled_deamoe")
import deamoe.model.fast_ffn as ff
from deamoe.model.lm import DeaMoEForCausalLM
from escape import curve

orig_rows, orig_compile = ff._department_rows, DeaMoEForCausalLM.compile_layers


def all_rows(pair_group, n_dept):
    flat = pair_group.reshape(-1)
    order, inv, counts = ff.sort_groups(flat, n_dept + 1)
    c = counts[:n_dept].clone()
    c[-1] += counts[n_dept]
    return order, inv, c


def aot_eager(self):
    for layer in self.model.layers:
        layer.compile(backend="aot_eager")


for name, rows, comp in [("all-rows", all_rows, orig_compile), ("aot_eager", orig_rows, aot_eager),
                         ("as-is", orig_rows, orig_compile)]:
    torch._dynamo.reset()
    ff._department_rows, DeaMoEForCausalLM.compile_layers = rows, comp
    t = time.time()
    finals = [curve("fast", True, 3e-3, seed)[-10:].mean().item() for seed in range(1, 7)]
    print(f"{name}: finals {[round(f, 3) for f in finals]}, stuck {sum(f > 2 for f in finals)}/6 ({time.time() - t:.0f}s)", flush=True)
