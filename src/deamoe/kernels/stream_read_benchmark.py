"""Measured read roofline: best streaming-read bandwidth over a few launch shapes (CUDA only)."""

from __future__ import annotations

import torch

from deamoe.kernels.stream_read import stream_read

VARIANTS = [(4096, 4, 8), (8192, 2, 8), (2048, 8, 4), (8192, 4, 16)]


def measure_read_roofline(gib: float = 4.0, reps: int = 20) -> dict:
    """Best streaming-read TB/s (median of `reps`) over VARIANTS, and torch.sum for comparison."""
    import triton.testing

    x = torch.randn(int(gib * 2**30) // 2, dtype=torch.bfloat16, device="cuda")
    nbytes = x.numel() * x.element_size()
    rows = []
    for block, unroll, warps in VARIANTS:
        ms = triton.testing.do_bench(lambda: stream_read(x, block, unroll, warps), warmup=25,
                                     rep=reps * 5, return_mode="median")
        rows.append({"block": block, "unroll": unroll, "num_warps": warps, "tbps": nbytes / ms / 1e9})
    ms_sum = triton.testing.do_bench(lambda: x.sum(dtype=torch.float32), warmup=25, rep=reps * 5,
                                     return_mode="median")
    best = max(rows, key=lambda r: r["tbps"])
    del x
    return {"peak_read_tbps": best["tbps"], "best": best, "variants": rows,
            "torch_sum_tbps": nbytes / ms_sum / 1e9, "buffer_gib": gib}


def main() -> int:
    """Print the roofline; on a machine without CUDA one line and exit status 2 (torch's own
    assertion was a traceback)."""
    from deamoe.errors import DeaMoEError, run_reporting

    def measure() -> None:
        if not torch.cuda.is_available():
            raise DeaMoEError("python -m deamoe.kernels.stream_read_benchmark: needs a CUDA GPU")
        print(measure_read_roofline())

    return run_reporting(measure)


if __name__ == "__main__":
    raise SystemExit(main())
