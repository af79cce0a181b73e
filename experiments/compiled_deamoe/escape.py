"""How often does 200-step bf16 DeaMoE training stay on the unigram plateau (loss ~3.97), per
path and learning rate?  Each run: one initialisation nudged by bf16 rounding (seeded)."""
import sys, time
import torch
from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM


def curve(impl, compiled, lr, nudge_seed, steps=200, ffn_type="deamoe"):
    torch.manual_seed(0)
    cfg = DeaMoEConfig(ffn_type=ffn_type, ffn_impl=impl, vocab_size=512, hidden_size=256,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, h_ffn=128,
                       n_expert=32, k_expert=8, n_dept=8, k_dept=5)
    model = DeaMoEForCausalLM(cfg).cuda()
    if nudge_seed:
        gen = torch.Generator(device="cuda").manual_seed(nudge_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + 2 ** -9 * torch.randn(p.shape, generator=gen, device="cuda"))
    if compiled:
        model.compile_layers()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    gen = torch.Generator().manual_seed(1)
    successors = torch.randint(0, 64, (64, 4), generator=gen)
    losses = []
    for _ in range(steps):
        tokens = torch.empty(16, 129, dtype=torch.int64)
        tokens[:, 0] = torch.randint(0, 64, (16,), generator=gen)
        for i in range(128):
            tokens[:, i + 1] = successors[tokens[:, i], torch.randint(0, 4, (16,), generator=gen)]
        tokens = tokens.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
            total = loss + 0.01 * model.aux_loss()
        total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return torch.stack(losses).float().cpu()


if __name__ == "__main__":
  for ffn_type in ("deamoe", "moe"):
    for lr in (3e-3, 1e-3):
        for impl, compiled in (("torch", False), ("fast", True)):
            t = time.time()
            finals = []
            for seed in range(1, 7):
                c = curve(impl, compiled, lr, seed, ffn_type=ffn_type)
                finals.append(c[-10:].mean().item())
            print(f"{ffn_type} lr {lr} {impl} compiled={compiled}: finals {[round(f, 3) for f in finals]} ({time.time() - t:.0f}s)", flush=True)
