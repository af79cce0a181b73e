"""Why does DeaMoE's compiled fast path train wrong with the Triton slot-sum op? Curves and
one-step gradients per parameter, with the op on and off, eager and compiled."""
import copy, sys, time
import torch
sys.path.insert(0, "tests/model")
import deamoe.model.mix_rows as mr
from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM
from test_fast_ffn import _bf16_curve

OP = mr._MIX_OP

def use(op_on):
    mr._MIX_OP = OP if op_on else None

def grads(impl, compiled, op_on, steps_before=0):
    use(op_on)
    torch.manual_seed(0)
    cfg = DeaMoEConfig(ffn_type="deamoe", ffn_impl=impl, vocab_size=512, hidden_size=256,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, h_ffn=128,
                       n_expert=32, k_expert=8, n_dept=8, k_dept=5)
    model = DeaMoEForCausalLM(cfg).cuda()
    if compiled:
        model.compile_layers()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (16, 129), generator=gen).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
        total = loss + 0.01 * model.aux_loss()
    total.backward()
    return loss.item(), {n: p.grad.double().clone() for n, p in model.named_parameters() if p.grad is not None}

ref_loss, ref = grads("torch", False, False)
for impl, compiled, op_on in [("fast", False, True), ("fast", False, False), ("fast", True, False), ("fast", True, True)]:
    l, g = grads(impl, compiled, op_on)
    worst = sorted(((((g[n] - ref[n]).norm() / ref[n].norm().clamp_min(1e-30)).item(), n) for n in ref), reverse=True)[:6]
    missing = [n for n in ref if n not in g]
    print(f"grads {impl} compiled={compiled} op={op_on}: loss {l:.5f} vs {ref_loss:.5f}; missing {missing}; worst", 
          [(n, round(r, 4)) for r, n in worst], flush=True)

for compiled, op_on in [(False, True), (True, True), (True, False)]:
    use(op_on)
    t = time.time()
    c = _bf16_curve("deamoe", "fast", compiled, 200)
    print(f"curve compiled={compiled} op={op_on}: {c[:10].mean():.3f} -> {c[-10:].mean():.3f} ({time.time()-t:.0f}s)", flush=True)
