"""The token combine alone on one GPU: deamoe.model.gather_sum's Triton op against eager and
inductor-compiled index_select + sum, at the gpu profile's large shape (32,768 tokens, width
1,024: the baseline's k = 8 rows, DeaMoE's 5 department slots) and Baseline-7B's width (4,096),
bf16 rows, result bf16 (the combine) or float32 (the dispatch's backward).  Prints ms and the
fraction of the read+write bandwidth bound at the measured 4.65 TB/s."""
import torch
from deamoe.model.gather_sum import gather_sum

BW = 4.65e12


def timed(fn, reps=50):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def ref(rows, idx, slots, dtype):
    return rows.index_select(0, idx).view(-1, slots, rows.shape[-1]).sum(1, dtype=dtype)


compiled_ref = torch.compile(ref)
print("T,slots,D,out_dtype,path,ms,bound_fraction,max_abs_diff_vs_eager")
for T, slots, D in ((32768, 8, 1024), (32768, 5, 1024), (32768, 8, 4096)):
    rows = torch.randn(T * slots, D, device="cuda").to(torch.bfloat16)
    idx = torch.randperm(T * slots, device="cuda")
    for dtype in (torch.bfloat16, torch.float32):
        bytes_moved = T * slots * D * 2 + T * D * (2 if dtype == torch.bfloat16 else 4) + idx.numel() * 8
        want = ref(rows, idx, slots, dtype).float()
        for name, fn in (("eager", lambda: ref(rows, idx, slots, dtype)),
                         ("inductor", lambda: compiled_ref(rows, idx, slots, dtype)),
                         ("triton op", lambda: gather_sum(rows, idx, slots, dtype))):
            ms = timed(fn)
            diff = (fn().float() - want).abs().max().item()
            print(f"{T},{slots},{D},{str(dtype).split('.')[-1]},{name},{ms:.4f},{bytes_moved / BW / (ms * 1e-3):.3f},{diff:.3g}", flush=True)
