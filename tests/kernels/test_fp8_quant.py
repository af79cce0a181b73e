"""The activation quantiser launched before a GEMM (deamoe.kernels.fp8_quant), under Triton's
interpreter on the CPU: vLLM's per-token-group formula, bit for bit the reference's e4m3 values
and scales.  The GEMM on its output: tests/kernels/test_fp8.py."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without CUDA)
from deamoe.kernels.fp8 import E4M3, quantize_activations
from deamoe.kernels.fp8_quant import quantize_groups


def test_activations_quantised_before_the_gemm_equal_the_reference_quantiser():
    torch.manual_seed(1)
    a = torch.randn(6, 96) * torch.logspace(-4, 3, 96)  # groups of very different sizes
    a[2, 32:64] = 0.0  # an all-zero group: the 1e-10 floor
    q, s = quantize_groups(a, 32)
    ref_q, ref_s = quantize_activations(a, 32)
    assert q.dtype == E4M3 and q.shape == (6, 96) and s.shape == (6, 3)
    torch.testing.assert_close(s, ref_s, rtol=0, atol=0)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))
    # a partial last group, as the GEMM's masked last K block
    q, s = quantize_groups(a[:, :40], 32)
    ref_q, ref_s = quantize_activations(a[:, :40], 32)
    assert s.shape == (6, 2) and torch.equal(s, ref_s)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))
    with pytest.raises(ValueError, match="unit column stride"):
        quantize_groups(a.t(), 32)
