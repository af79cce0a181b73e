"""Model layer: MoE / DeaMoE FFNs and the decoder LM.

Importing this package registers DeaMoEConfig / DeaMoEForCausalLM with transformers' Auto
classes, so `AutoModelForCausalLM.from_pretrained(checkpoint_dir)` works in this process.
"""

from transformers import AutoConfig, AutoModelForCausalLM

from deamoe.model.layers import DeaMoE, MoE, build_ffn, operator, reference_forward
from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM

AutoConfig.register(DeaMoEConfig.model_type, DeaMoEConfig, exist_ok=True)
AutoModelForCausalLM.register(DeaMoEConfig, DeaMoEForCausalLM, exist_ok=True)

__all__ = [
    "DeaMoE",
    "DeaMoEConfig",
    "DeaMoEForCausalLM",
    "MoE",
    "build_ffn",
    "operator",
    "reference_forward",
]
