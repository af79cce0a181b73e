"""Uninitialised-memory hunt: before every step fill the caching allocator's free blocks with
NaN, then report the first step where a DeaMoE layer's output or a parameter's gradient is not
finite; eager and compiled fast paths, op on."""
import sys
import torch
sys.path.insert(0, "tests/model")
from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM


def poison():
    p = [torch.full((2 ** e,), float("nan"), dtype=torch.bfloat16, device="cuda") for e in range(10, 26)]
    p += [torch.full((3 * 2 ** e,), float("nan"), dtype=torch.float32, device="cuda") for e in range(10, 23)]
    del p


def run(compiled, ffn_type="deamoe", impl="fast", steps=60):
    torch.manual_seed(0)
    cfg = DeaMoEConfig(ffn_type=ffn_type, ffn_impl=impl, vocab_size=512, hidden_size=256,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, h_ffn=128,
                       n_expert=32, k_expert=8, n_dept=8, k_dept=5)
    model = DeaMoEForCausalLM(cfg).cuda()
    bad = []
    for i, layer in enumerate(model.model.layers):
        layer.mlp.register_forward_hook(lambda m, a, out, i=i: bad.append(f"mlp{i} out") if not torch.isfinite(out[0] if isinstance(out, tuple) else out).all() else None)
    if compiled:
        model.compile_layers()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    gen = torch.Generator().manual_seed(1)
    successors = torch.randint(0, 64, (64, 4), generator=gen)
    for step in range(steps):
        tokens = torch.empty(16, 129, dtype=torch.int64)
        tokens[:, 0] = torch.randint(0, 64, (16,), generator=gen)
        for i in range(128):
            tokens[:, i + 1] = successors[tokens[:, i], torch.randint(0, 4, (16,), generator=gen)]
        tokens = tokens.cuda()
        poison()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens[:, :-1], targets=tokens[:, 1:]).loss
            total = loss + 0.01 * model.aux_loss()
        total.backward()
        nonfinite = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        if bad or nonfinite or not torch.isfinite(loss):
            print(f"  compiled={compiled} {ffn_type}: step {step} loss {loss.item():.3f}; outputs {bad[:4]}; grads {nonfinite[:8]}", flush=True)
            return
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"  compiled={compiled} {ffn_type}: {steps} steps finite, loss {loss.item():.3f}", flush=True)


for compiled in (False, True):
    run(compiled)
run(True, "moe")
