"""The vLLM model's FFN op body (deamoe.serve.ffn_op.decode_ffn) on the CPU: Triton's interpreter
runs the kernels, so this checks the wiring -- the layer's weights and selection bias, the tiles
of the nearest measured batch -- against the PyTorch layer.  The same op in CUDA graphs on a GPU:
tests/serve/test_ffn_op_gpu.py."""

from __future__ import annotations

import pytest
import torch

import deamoe.kernels  # noqa: F401  (interpreter without CUDA)
from deamoe.decode.picks import TilePicks, shape_key
from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.model.layers import build_ffn
from deamoe.serve import ffn_op

MOE = MoEShape(h=64, h_ffn=32, n_expert=8, k_expert=2)
DEA = DeaMoEShape(h=64, h_ffn=32, n_dept=4, n_expert=16, k_dept=2, k_expert=4,
                  expert_init="random")
# non-default picks at batch 4 (split parts on their own streams, the dense department GEMM)
PICKS = TilePicks({shape_key(MOE): {4: "w13=n32-k32-w4-s1;w2=n16-k32-w4-s1;split_launches=2"},
                   shape_key(DEA): {4: "dept_up=n32-k32-w4-s1;split_launches=2;dense_dept_up=1"}})


def _layer(shape):
    torch.manual_seed(0)
    layer = build_ffn(shape, init_std=0.1).eval()
    layer.expert_bias.normal_(std=0.05)  # a trained bias-balancing checkpoint: selection moves
    return layer


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
@pytest.mark.parametrize("picks", [PICKS, TilePicks()], ids=["picked", "unmeasured"])
def test_decode_ffn_equals_the_layer(shape, picks):
    layer = _layer(shape)
    x = torch.randn(2, 3, shape.h)  # leading dims kept
    with torch.no_grad():
        got = ffn_op.decode_ffn(layer, x, picks)
        torch.testing.assert_close(got, layer(x), rtol=1e-3, atol=1e-4)
        # the bias is the layer's: without it the selection (and the output) differs
        saved = layer.expert_bias.clone()
        layer.expert_bias.zero_()
        assert not torch.allclose(ffn_op.decode_ffn(layer, x, picks), got, atol=1e-4)
        layer.expert_bias.copy_(saved)


def test_decode_ffn_runs_the_pick_of_the_nearest_batch(monkeypatch):
    import deamoe.decode.step as step

    seen = []
    monkeypatch.setattr(step, "ffn_step",
                        lambda shape, w, x, tiles: seen.append((x.shape[0], tiles, w)) or x)
    layer = _layer(DEA)
    for batch in (1, 4, 9):
        ffn_op.decode_ffn(layer, torch.randn(batch, DEA.h), PICKS)
    ffn_op.decode_ffn(_layer(DEA.replace(h_ffn=16)), torch.randn(4, DEA.h), PICKS)
    assert [b for b, _, _ in seen] == [1, 4, 9, 4]
    assert all(t.split_launches == 2 and t.dense_dept_up for _, t, _ in seen[:3])
    assert seen[3][1].split_launches == 1  # a shape the table never measured: default tiles
    w = seen[0][2]
    assert w["router"] is layer.router.weight and w["expert_bias"] is layer.expert_bias
    assert w["expert_down"] is layer.expert_down


def test_packaged_picks_cover_the_7b_layers():
    from deamoe.decode.picks import packaged
    from deamoe.shapes import table1_row

    row = table1_row("Baseline-7B")
    for shape in (row.baseline, row.deamoe):
        assert packaged().knobs(shape, 1)[0] == 4
        assert packaged().knobs(shape, 256)[0] == 128


def test_imports_nothing_from_vllm():
    import subprocess
    import sys

    code = ("import sys, deamoe.serve.ffn_op; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr[-2000:]


@pytest.mark.parametrize("shape", [MOE, DEA], ids=["moe", "deamoe"])
@pytest.mark.parametrize("precision", ["fp8", "fp8-w8a8"])
def test_decode_ffn_on_fp8_weights(shape, precision):
    # serve.ffn_weights: the layer's FFN matrices block-quantised once (kept on the layer, made
    # again when the weights are replaced), the step on them with the bf16 pick fitted to the
    # blocks, against the layer on the dequantised values
    import copy

    from deamoe.kernels.fp8 import Fp8Format, dequantize_weights

    fmt = Fp8Format.of(precision, (32, 32))
    layer = _layer(shape)
    x = torch.randn(5, shape.h)
    with torch.no_grad():
        got = ffn_op.decode_ffn(layer, x, PICKS, fp8=fmt)
        w = ffn_op.fp8_layer_weights(layer, fmt)
        assert w is ffn_op.fp8_layer_weights(layer, fmt)  # quantised once
        assert w["router"] is layer.router.weight and w["expert_bias"] is layer.expert_bias
        ref = copy.deepcopy(layer)
        for name, t in dequantize_weights(w).items():
            if name not in ("router", "expert_bias"):
                getattr(ref, name).copy_(t)
        want = ref(x)
        rel = ((got - want).norm() / want.norm()).item()
        assert rel < (1e-4 if precision == "fp8" else 1e-1), rel
        layer.router.weight = torch.nn.Parameter(layer.router.weight.clone())  # a reload
        assert ffn_op.fp8_layer_weights(layer, fmt) is not w


def test_server_passes_the_ffn_weights_to_the_model():
    import json

    from deamoe.errors import ConfigError
    from deamoe.serve.server import server_command
    from deamoe.serve.settings import FFN_WEIGHTS_KEY, ServeSettings

    cmd = server_command("ckpt", 8000, "m", ServeSettings(ffn_weights="fp8-w8a8"))
    flag = cmd.index("--hf-overrides")
    assert json.loads(cmd[flag + 1]) == {FFN_WEIGHTS_KEY: "fp8-w8a8"}
    assert "--hf-overrides" not in server_command("ckpt", 8000, "m", ServeSettings())
    with pytest.raises(ConfigError, match="serve.ffn_weights"):
        ServeSettings(ffn_weights="int8")


def test_the_precisions_have_one_definition():
    # kernels.fp8.PRECISIONS; the schemas' enums of serve.ffn_weights and microbench.weight_dtype
    # follow it, and checking a default config imports no kernel code (the Snakefile checks it)
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from deamoe.kernels.fp8 import PRECISIONS

    schemas = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
    serve = yaml.safe_load((schemas / "serve.schema.yaml").read_text())["properties"]
    bench = yaml.safe_load((schemas / "microbench.schema.yaml").read_text())["properties"]
    assert tuple(serve["ffn_weights"]["enum"]) == PRECISIONS
    assert tuple(bench["weight_dtype"]["items"]["enum"]) == PRECISIONS
    code = ("import sys, yaml; from deamoe.checks import check_config; "
            "check_config(yaml.safe_load(open('config.yaml'))); print('torch' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(root / "src")})
    assert out.stdout.strip() == "False", out.stderr[-500:]
