"""Where does DeaMoE's compiled fast path part from the torch path in a run that sticks at the
unigram plateau?  At checkpoints of a fast+compile training run, the same weights and batch go
through torch-eager, fast-eager and the compiled training model: loss and per-parameter gradient
errors against torch-eager."""
import sys, time
import torch
from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM

LR, SEED, STEPS, CHECK = 3e-3, int(sys.argv[1]) if len(sys.argv) > 1 else 2, 60, {0, 2, 4, 6, 8, 12, 20, 40, 59}


def cfg(impl):
    return DeaMoEConfig(ffn_type="deamoe", ffn_impl=impl, vocab_size=512, hidden_size=256,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, h_ffn=128,
                        n_expert=32, k_expert=8, n_dept=8, k_dept=5)


def grads(model, tokens):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
        total = loss + 0.01 * model.aux_loss()
    total.backward()
    g = {n: p.grad.double().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.item(), g


torch.manual_seed(0)
model = DeaMoEForCausalLM(cfg("fast")).cuda()
gen = torch.Generator(device="cuda").manual_seed(SEED)
with torch.no_grad():
    for p in model.parameters():
        p.mul_(1 + 2 ** -9 * torch.randn(p.shape, generator=gen, device="cuda"))
model.compile_layers()
opt = torch.optim.AdamW(model.parameters(), lr=LR, fused=True)
gen = torch.Generator().manual_seed(1)
successors = torch.randint(0, 64, (64, 4), generator=gen)
for step in range(STEPS):
    tokens = torch.empty(16, 129, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, 64, (16,), generator=gen)
    for i in range(128):
        tokens[:, i + 1] = successors[tokens[:, i], torch.randint(0, 4, (16,), generator=gen)]
    tokens = tokens.cuda()
    if step in CHECK:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        ref_model = DeaMoEForCausalLM(cfg("torch")).cuda(); ref_model.load_state_dict(state)
        eager = DeaMoEForCausalLM(cfg("fast")).cuda(); eager.load_state_dict(state)
        l0, g0 = grads(ref_model, tokens)
        line = [f"step {step}: torch {l0:.4f}"]
        for name, m in (("fast-eager", eager), ("fast-compiled", model)):
            l, g = grads(m, tokens)
            err = sorted((((g[n] - g0[n]).norm() / g0[n].norm().clamp_min(1e-30)).item(), n) for n in g0)[::-1][:3]
            line.append(f"{name} {l:.4f} worst " + ", ".join(f"{n.replace('model.layers.', 'L')} {r:.3f}" for r, n in err))
        print(" | ".join(line), flush=True)
        del ref_model, eager
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
        total = loss + 0.01 * model.aux_loss()
    total.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("final", loss.item())
