"""The vLLM model's FFN op body (deamoe.serve.ffn_op.decode_ffn) in CUDA graphs, on a GPU.

A two-layer decoder (RMSNorm -> FFN -> residual, twice) of Baseline-7B / DeaMoE-7B layer shapes
-- the shapes the committed H200 table measured, so every batch runs a tuned pick -- is captured
in one CUDA graph per batch (1, 4, 16, 64), with host synchronisation made an error during the
capture, and replayed on new inputs.  Each layer's FFN output must equal the PyTorch reference
layer (deamoe.model.layers, fp32 with the same weights) on the input that layer saw in the replay, routed by
deamoe.routing.route from the same bf16 router logits: relative error by norm < 1e-2.  (Each
layer is checked on its own input so that a routing near-tie flipped by bf16 noise in layer 1
does not make layer 2 differ.)

The same with the FFN matrices block-quantised to FP8 (serve.ffn_weights fp8 / fp8-w8a8,
deamoe.kernels.fp8): the layers quantised once, eagerly, before the capture; the reference on
the dequantised weights; the tolerance the battery's (fp8 1e-2, w8a8 1e-1: its activations are
quantised, the reference's are not).

With DEAMOE_GPU_RESULTS_DIR set, the rows (GPU, versions, git sha, date, error per layer and
replay, which measured batch's pick ran, weights) are written to
$DEAMOE_GPU_RESULTS_DIR/ffn_op_graph.csv.
Skipped without CUDA; the same op under Triton's CPU interpreter: tests/serve/test_ffn_op.py.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BATCHES = (1, 4, 16, 64)
REPLAYS = 3  # new inputs per captured graph
TOL = 1e-2


def _rms(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _layers(shape, n: int, seed: int) -> list:
    """n (bf16 layer, its fp32 reference) pairs: the benchmark's fan-in scaled random weights, the
    reference holding the same (bf16-rounded) values in fp32, and a nonzero fp32 selection bias
    (as a checkpoint trained with bias balancing has)."""
    from deamoe.decode.weights import random_weights
    from deamoe.model.layers import build_ffn

    out = []
    for i in range(n):
        layer = build_ffn(shape).to("cuda", torch.bfloat16).eval()
        w = random_weights(shape, "cuda", torch.bfloat16, seed=seed + i)
        g = torch.Generator(device="cuda").manual_seed(seed + 100 + i)
        with torch.no_grad():
            layer.router.weight.copy_(w.pop("router"))
            for name, t in w.items():
                getattr(layer, name).copy_(t)
        # the bias stays fp32, as trained
        layer.expert_bias = torch.randn(shape.n_expert, generator=g, device="cuda") * 1e-3
        ref = copy.deepcopy(layer).float()
        out.append((layer, ref))
    return out


@pytest.fixture(scope="module")
def rows():
    collected: list[dict] = []
    yield collected
    folder = os.environ.get("DEAMOE_GPU_RESULTS_DIR")
    if folder and collected:
        import pandas as pd
        import triton

        from deamoe.io import write_csv
        from deamoe.provenance import provenance

        prov = provenance("cuda")
        df = pd.DataFrame(collected).assign(gpu=prov["device"], torch=prov["torch"],
                                            triton=triton.__version__, python=prov["python"],
                                            git_sha=prov["git_sha"], date=prov["date"])
        write_csv(Path(folder) / "ffn_op_graph.csv", df)


def _dequantised_references(layers, fmt) -> None:
    """Each reference layer on its layer's FP8 weights, dequantised (the op's own quantisation:
    deamoe.serve.ffn_op.fp8_layer_weights, made here once before any capture)."""
    from deamoe.kernels.fp8 import dequantize_weights
    from deamoe.serve.ffn_op import fp8_layer_weights

    with torch.no_grad():
        for layer, ref in layers:
            for name, t in dequantize_weights(fp8_layer_weights(layer, fmt)).items():
                if name not in ("router", "expert_bias"):
                    getattr(ref, name).copy_(t)


@pytest.mark.parametrize("weights", ["bf16", "fp8", "fp8-w8a8"])
@pytest.mark.parametrize("kind", ["moe", "deamoe"])
def test_decoder_in_cuda_graph_equals_reference(kind, weights, rows):
    from deamoe.decode.picks import packaged
    from deamoe.kernels.battery import tolerance
    from deamoe.kernels.fp8 import Fp8Format
    from deamoe.shapes import table1_row
    from deamoe.routing import route
    from deamoe.serve.ffn_op import decode_ffn

    row = table1_row("Baseline-7B")
    shape = row.baseline if kind == "moe" else row.deamoe
    layers = _layers(shape, 2, seed=7)
    fmt = Fp8Format.of(weights)
    tol = TOL if fmt is None else tolerance("cuda", torch.bfloat16, fmt)
    if fmt is not None:
        _dequantised_references(layers, fmt)
    picks = packaged()
    g_in = torch.Generator(device="cuda").manual_seed(11)
    bad = []
    for batch in BATCHES:
        found = picks.knobs(shape, batch)
        assert found is not None, f"no committed pick for the {kind} Baseline-7B layer"
        x = torch.randn(batch, shape.h, generator=g_in, device="cuda", dtype=torch.bfloat16)
        seen: list[torch.Tensor] = []  # each layer's FFN input and output, graph-owned

        def step():
            seen.clear()
            h = x
            for layer, _ in layers:
                a = _rms(h)
                f = decode_ffn(layer, a, picks, fp8=fmt)
                seen.extend((a, f))
                h = h + f
            return h

        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # compile the kernels outside the capture
                step()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):  # (its entry synchronises: the mode is set inside)
                torch.cuda.set_sync_debug_mode("error")  # a host sync in the step raises
                try:
                    step()
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            for replay in range(REPLAYS):
                x.copy_(torch.randn(x.shape, generator=g_in, device="cuda", dtype=x.dtype))
                for t in seen[1::2]:
                    t.fill_(float("nan"))  # a replay that skipped a write stays NaN
                graph.replay()
                torch.cuda.synchronize()
                for i, (layer, ref_layer) in enumerate(layers):
                    a, f = seen[2 * i], seen[2 * i + 1]
                    ids, w = route(shape, layer.router(a), bias=layer.expert_bias)
                    ref = ref_layer(a.float(), ids, w)
                    rel = ((f.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                    finite = bool(torch.isfinite(f).all())
                    ok = finite and rel < tol
                    rows.append({"kind": kind, "shape": "Baseline-7B", "batch": batch,
                                 "pick_of_batch": found[0], "tiles": found[1], "layer": i,
                                 "replay": replay, "rel_err": rel, "finite": finite,
                                 "tol": tol, "ok": ok, "sync_debug": "error",
                                 "weights": weights})
                    if not ok:
                        bad.append(f"batch {batch} replay {replay} layer {i}: rel err {rel:.2e}")
            del graph
    assert not bad, "; ".join(bad)
