"""How often does 200-step bf16 training stay on the unigram plateau (loss ~3.97), per path and
learning rate?  Each run: the GPU test's small model and Markov-chain batches
(tests/model/test_fast_ffn.py `_bf16_curve`), initial weights nudged by bf16 rounding (seeded).
Run from the repository root with PYTHONPATH=src:tests/model (pytest importable)."""
import time

from test_fast_ffn import _bf16_curve


def finals(ffn_type, impl, compiled, lr, seeds=range(1, 7)):
    return [_bf16_curve(ffn_type, impl, compiled, 200, nudge=2 ** -9, nudge_seed=s, lr=lr)[-10:].mean().item()
            for s in seeds]


if __name__ == "__main__":
    for ffn_type in ("deamoe", "moe"):
        for lr in (3e-3, 1e-3):
            for impl, compiled in (("torch", False), ("fast", True)):
                t = time.time()
                f = finals(ffn_type, impl, compiled, lr)
                print(f"{ffn_type} lr {lr} {impl} compiled={compiled}: finals {[round(x, 3) for x in f]}, "
                      f"stuck {sum(x > 2 for x in f)}/6 ({time.time() - t:.0f}s)", flush=True)
