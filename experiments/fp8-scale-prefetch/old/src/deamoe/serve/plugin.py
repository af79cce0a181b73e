"""vLLM general plugin (entry point `deamoe` in group `vllm.general_plugins`, see pyproject.toml).

vLLM calls `register()` in every process it starts (API server, engine core, workers), so a
checkpoint written by the pre-training stage is served as it is:

    python -m vllm.entrypoints.openai.api_server --model results/train/pretrain-tiny-deamoe-s0/checkpoint

Both the DeaMoE and the baseline checkpoints carry `architectures: ["DeaMoEForCausalLM"]` and
`model_type: "deamoe"`; the config's `ffn_type` picks the FFN, as in the Hugging Face class.
Keep this module light: vLLM imports the model module lazily (by its "module:Class" string).
"""

from __future__ import annotations

ARCHITECTURES = {
    # checkpoint architecture name -> vLLM model class (one class, both FFN types)
    "DeaMoEForCausalLM": "deamoe.serve.vllm_model:DeaMoEForCausalLMVLLM",
}


def register_config() -> None:
    """Make AutoConfig / AutoModelForCausalLM know model_type 'deamoe' in this process."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from deamoe.model.lm import DeaMoEConfig, DeaMoEForCausalLM

    try:
        AutoConfig.register("deamoe", DeaMoEConfig)
    except ValueError:  # already registered (deamoe.model did it, or a second call)
        pass
    try:
        AutoModelForCausalLM.register(DeaMoEConfig, DeaMoEForCausalLM)
    except ValueError:
        pass


def register() -> None:
    register_config()
    from vllm import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    for arch, target in ARCHITECTURES.items():
        if arch not in supported:
            ModelRegistry.register_model(arch, target)
