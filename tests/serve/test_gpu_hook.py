"""The GPU hook of the vLLM model (deamoe.serve.ffn_op inside torch.ops.deamoe.ffn) computes the
same FFN as the PyTorch layer.  Without CUDA the kernels run under Triton's
interpreter, which must be switched on before vLLM imports Triton: so the check runs in a fresh
process with TRITON_INTERPRET=1.  It verifies the wiring (routing by deamoe.routing, weights,
kernel choice per FFN type); on a GPU the same script runs the compiled kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm")
pytest.importorskip("triton")

SCRIPT = r"""
import torch, vllm
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.model.layers import build_ffn
from deamoe.serve.vllm_model import _gpu_ffn, kernels_available

assert kernels_available(), "triton not importable"
dev = "cuda" if torch.cuda.is_available() else "cpu"
for shape in (DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=4,
                          expert_init="random"),
              MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2),
              # with shared experts: summed into the routed output on the same primitive
              DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=4,
                          expert_init="random", n_shared=2),
              MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2, n_shared=1)):
    torch.manual_seed(0)
    layer = build_ffn(shape, init_std=0.1).to(dev)
    x = torch.randn(5, 64, device=dev)
    with torch.no_grad():
        torch.testing.assert_close(_gpu_ffn(layer, x), layer(x), rtol=1e-3, atol=1e-4)
    print("ok", shape.kind)
"""


@pytest.mark.slow
def test_gpu_hook_matches_layer():
    env = dict(os.environ)
    try:
        import torch

        if not torch.cuda.is_available():
            env["TRITON_INTERPRET"] = "1"
    except ImportError:
        pass
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", "deamoe", "ok", "moe"] * 2
