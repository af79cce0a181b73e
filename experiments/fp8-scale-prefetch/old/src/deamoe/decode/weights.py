"""The decode step's weights by name: the layout of deamoe.model.layers, as one dict per layer.

  router                                   [n_expert, h]
  baseline    gate_proj, up_proj            [n_expert, h_ffn, h];  down_proj    [n_expert, h, h_ffn]
  DeaMoE      dept_gate, dept_up            [n_dept, h_ffn, h];    dept_down    [n_dept, h, h_ffn]
              expert_gate, expert_up, expert_down                  [n_expert, h_ffn, h_ffn]
  shared experts (n_shared > 0), fused     shared_gate, shared_up [S, h];  shared_down [h, S]
  expert_bias (optional)                   [n_expert]: the selection-only routing bias
Every FFN matrix (all but the router) may instead be block-scaled FP8 (deamoe.kernels.fp8.
Fp8Weight, `fp8_weights`): the decode step then runs the FP8 layer, activations still bf16.
"""

from __future__ import annotations

import torch

from deamoe.shapes import DeaMoEShape, MoEShape

MOE_WEIGHTS = ("gate_proj", "up_proj", "down_proj")
DEAMOE_WEIGHTS = ("dept_gate", "dept_up", "dept_down", "expert_gate", "expert_up", "expert_down")
SHARED_WEIGHTS = ("shared_gate", "shared_up", "shared_down")
FFN_WEIGHTS = MOE_WEIGHTS + DEAMOE_WEIGHTS + SHARED_WEIGHTS  # what FP8 quantises (not the router)


def fp8_weights(w: dict, fmt) -> dict:
    """A step's weights with every FFN matrix block-quantised in `fmt` (a deamoe.kernels.fp8.
    Fp8Format; None: w itself), one at a time; the router and the selection bias as given."""
    if fmt is None:
        return w
    from deamoe.kernels.fp8 import quantize_weights

    return quantize_weights(w, FFN_WEIGHTS, fmt)


def layer_weights(layer) -> dict:
    """A deamoe.model.layers MoE / DeaMoE layer's tensors under the step's names (the same
    tensors, no copies), its selection bias included."""
    names = DEAMOE_WEIGHTS if layer.shape.kind == "deamoe" else MOE_WEIGHTS
    w = {name: getattr(layer, name) for name in names}
    w["router"] = layer.router.weight
    w["expert_bias"] = layer.expert_bias
    if layer.shape.n_shared:  # ffn_step adds the shared experts itself
        from deamoe.kernels.shared_expert import shared_weights  # Triton only where it runs

        w.update(zip(SHARED_WEIGHTS, shared_weights(layer)))
    return w


def random_weights(shape: MoEShape | DeaMoEShape, device, dtype=torch.bfloat16, seed=0,
                   fp8=None) -> dict:
    """Weights of one layer under the step's names (fan-in scaled normals); fp8 (an Fp8Format):
    the FFN matrices block-quantised (fp8_weights), each bf16 matrix dropped once quantised."""
    g = torch.Generator(device=device).manual_seed(seed)
    f, h = shape.h_ffn, shape.h

    def mat(*size):
        t = torch.randn(*size, generator=g, device=device, dtype=dtype)
        return t.mul_(size[-1] ** -0.5)

    w = {"router": mat(shape.n_expert, h)}
    if isinstance(shape, DeaMoEShape):
        d, e = shape.n_dept, shape.n_expert
        w.update(dept_gate=mat(d, f, h), dept_up=mat(d, f, h), dept_down=mat(d, h, f),
                 expert_gate=mat(e, f, f), expert_up=mat(e, f, f), expert_down=mat(e, f, f))
    else:
        e = shape.n_expert
        w.update(gate_proj=mat(e, f, h), up_proj=mat(e, f, h), down_proj=mat(e, h, f))
    if shape.n_shared:  # the shared experts, fused (deamoe.model.layers.SharedExperts)
        S = shape.shared_ffn
        w.update(shared_gate=mat(S, h), shared_up=mat(S, h), shared_down=mat(h, S))
    if fp8 is not None:  # one matrix at a time, so a bf16 stack and its FP8 copy never all coexist
        from deamoe.kernels.fp8 import quantize

        for name in [k for k in w if k in FFN_WEIGHTS]:
            w[name] = quantize(w.pop(name), fp8)
    return w
