"""DeaMoE and the baseline MoE as a vLLM model (vLLM 0.32 model interface).

One class serves both checkpoints of the pre-training stage, exactly like the Hugging Face class
(deamoe.model.lm.DeaMoEForCausalLM): the config's `ffn_type` ("moe" | "deamoe") picks the FFN.
Attention, norms, RoPE, embeddings and the LM head are vLLM's own layers (paged KV cache,
continuous batching); the FFN of every layer is the project's layer (deamoe.model.layers.MoE /
DeaMoE), so routing goes through deamoe.routing.route and the layer math is the trained one.

The FFN runs inside one opaque custom op, `torch.ops.deamoe.ffn(x, layer_name)`, for two reasons:
  * torch.compile / CUDA graphs see a single op with a static output shape; the data-dependent
    grouping inside (argsort, bincount, nonzero) never reaches the compiler;
  * on GPU the op's body is deamoe.serve.ffn_op.decode_ffn: the project's Triton kernels with
    the tiles the H200 microbenchmark picked per layer shape and batch, which CUDA graphs then
    capture as part of the decode step (see `_gpu_ffn`).
The op finds its layer through vLLM's forward context (the same mechanism vLLM uses for its own
fused-MoE and attention ops), so no weights travel as op arguments.

Weight names equal the Hugging Face checkpoint's (model.layers.N.mlp.dept_gate, ...,
model.layers.N.mlp.shared_experts.gate_proj.weight for the shared experts); only q/k/v are stacked into vLLM's QKVParallelLinear.  Tensor parallelism is not supported (world
size 1): the checkpoints served here fit one device.
"""


from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.forward_context import get_forward_context
from vllm.logger import init_logger
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.sequence import IntermediateTensors
from vllm.utils.torch_utils import (
    LayerNameType,
    _encode_layer_name,
    _resolve_layer_name,
    direct_register_custom_op,
)

from deamoe.kernels.fp8 import Fp8Format
from deamoe.model.layers import DeaMoE, MoE, build_ffn
from deamoe.serve.ffn_op import decode_ffn, kernels_available
from deamoe.serve.settings import FFN_WEIGHTS_KEY

logger = init_logger(__name__)

_QKV = {"q_proj": "q", "k_proj": "k", "v_proj": "v"}


# --------------------------------------------------------------------------------------------
# The FFN custom op
# --------------------------------------------------------------------------------------------


def _gpu_ffn(layer: MoE | DeaMoE, x: torch.Tensor, fp8=None) -> torch.Tensor | None:
    """GPU path: deamoe.serve.ffn_op.decode_ffn -- the Triton decode kernels with the committed
    H200 tile picks for this layer's shape and batch, routing on the GPU without host
    synchronisation, so the CUDA graphs vLLM captures around this op contain the kernels.
    Returns None when Triton cannot be imported (then the PyTorch layer runs; it synchronises
    with the host, so the server must run with --enforce-eager: deamoe.serve.server adds it)."""
    if not kernels_available():
        logger.warning_once("triton unavailable: PyTorch FFN path on GPU (needs --enforce-eager)")
        return None
    return decode_ffn(layer, x, fp8=fp8)  # with the shared experts, if any (ffn_step adds them)


def _ffn_op(x: torch.Tensor, layer_name: LayerNameType) -> torch.Tensor:
    ffn: DeaMoEFFN = get_forward_context().no_compile_layers[_resolve_layer_name(layer_name)]
    return ffn.forward_impl(x)


def _ffn_op_fake(x: torch.Tensor, layer_name: LayerNameType) -> torch.Tensor:
    return torch.empty_like(x)


_LIB = torch.library.Library("deamoe", "FRAGMENT")  # keeps the op alive with this module
direct_register_custom_op(
    op_name="ffn", op_func=_ffn_op, fake_impl=_ffn_op_fake, target_lib=_LIB
)


class DeaMoEFFN(nn.Module):
    """Holds the project's FFN layer as `.ffn`; forward goes through torch.ops.deamoe.ffn."""

    def __init__(self, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.layer_name = prefix
        # serve.ffn_weights, passed as --hf-overrides (deamoe.serve.server): the GPU kernels
        # run on the FFN matrices block-quantised to FP8 (deamoe.kernels.fp8), or bf16
        self.fp8 = Fp8Format.of(getattr(config, FFN_WEIGHTS_KEY, "bf16"))
        # The checkpoint's weight names are model.layers.N.mlp.<param>: keep the layer's
        # parameters directly on this module (no extra name level).
        layer = build_ffn(config.ffn_shape(), config.init_std)
        self.__dict__["ffn"] = layer  # not a submodule: its params are adopted below
        for name, param in list(layer.named_parameters(recurse=True)):
            self._adopt(name, param)
        self.register_buffer("expert_bias", layer.expert_bias)
        static = vllm_config.compilation_config.static_forward_context
        if prefix in static:
            raise ValueError(f"duplicate layer name {prefix}")
        static[prefix] = self

    def _adopt(self, name: str, param: nn.Parameter) -> None:
        if name == "router.weight":
            self.router = self.ffn.router  # a submodule: router.weight keeps its name
        elif name.startswith("shared_experts."):
            self.shared_experts = self.ffn.shared_experts  # likewise shared_experts.*.weight
        else:
            self.register_parameter(name, param)

    def _sync(self) -> None:
        # vLLM's loader may replace parameters/buffers; point the layer at the live tensors.
        for name, param in self.named_parameters(recurse=False):
            setattr(self.ffn, name, param)
        self.ffn.expert_bias = self.expert_bias
        self.ffn.router = self.router
        if self.ffn.shape.n_shared:
            self.ffn.shared_experts = self.shared_experts

    def forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            out = _gpu_ffn(self.ffn, x, self.fp8)
            if out is not None:
                return out
        return self.ffn(x)  # deamoe.model.layers: route() + two-stage grouped forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.deamoe.ffn(x, _encode_layer_name(self.layer_name))


# --------------------------------------------------------------------------------------------
# Decoder
# --------------------------------------------------------------------------------------------


class DeaMoEAttention(nn.Module):
    def __init__(self, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        config = vllm_config.model_config.hf_config
        h, self.head_dim = config.hidden_size, config.head_dim
        self.n_heads, self.n_kv = config.num_attention_heads, config.num_key_value_heads
        self.q_size, self.kv_size = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        self.qkv_proj = QKVParallelLinear(
            h, self.head_dim, self.n_heads, self.n_kv, bias=False, prefix=f"{prefix}.qkv_proj"
        )
        self.o_proj = RowParallelLinear(
            self.q_size, h, bias=False, prefix=f"{prefix}.o_proj"
        )
        # deamoe.model.lm uses rotate-half RoPE, vLLM's "neox" layout.
        self.rotary_emb = get_rope(
            self.head_dim,
            max_position=config.max_position_embeddings,
            is_neox_style=True,
            rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        )
        self.attn_dim = attention_head_size(self.head_dim)
        self.attn = Attention(
            self.n_heads,
            self.attn_dim,
            self.head_dim**-0.5,  # the true head size: zero padding leaves q.k unchanged
            num_kv_heads=self.n_kv,
            cache_config=vllm_config.cache_config,
            prefix=f"{prefix}.attn",
        )

    def _pad(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        t = t.view(-1, heads, self.head_dim)
        return F.pad(t, (0, self.attn_dim - self.head_dim)).view(-1, heads * self.attn_dim)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        if self.attn_dim != self.head_dim:
            q, k, v = self._pad(q, self.n_heads), self._pad(k, self.n_kv), self._pad(v, self.n_kv)
            y = self.attn(q, k, v).view(-1, self.n_heads, self.attn_dim)[..., : self.head_dim]
            y = y.reshape(-1, self.q_size)
        else:
            y = self.attn(q, k, v)
        out, _ = self.o_proj(y)
        return out


def attention_head_size(head_dim: int) -> int:
    """Head size given to vLLM's attention: the model's, or on the CPU backend (which supports
    only 32, 64, 80, ... 512) the next supported size, q/k/v zero-padded.  Padding changes no
    result: the extra q.k terms are 0 and the extra output columns are dropped."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return head_dim
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    sizes = sorted(CPUAttentionBackend.get_supported_head_sizes())
    fits = [s for s in sizes if s >= head_dim]
    if not fits:
        raise ValueError(f"head_dim={head_dim} exceeds vLLM's CPU attention sizes {sizes}")
    return fits[0]


class DeaMoEDecoderLayer(nn.Module):
    def __init__(self, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.input_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = DeaMoEAttention(vllm_config, f"{prefix}.self_attn")
        self.post_attention_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = DeaMoEFFN(vllm_config, f"{prefix}.mlp")

    def forward(self, positions, x, residual):
        if residual is None:
            residual, x = x, self.input_norm(x)
        else:
            x, residual = self.input_norm(x, residual)
        x = self.self_attn(positions, x)
        x, residual = self.post_attention_norm(x, residual)
        return self.mlp(x), residual


@support_torch_compile
class DeaMoEModelVLLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        if get_tensor_model_parallel_world_size() != 1:
            raise ValueError("the DeaMoE vLLM model supports tensor parallel size 1 only")
        self.embed_tokens = VocabParallelEmbedding(
            config.vocab_size, config.hidden_size, prefix=f"{prefix}.embed_tokens"
        )
        self.layers = nn.ModuleList(
            DeaMoEDecoderLayer(vllm_config, f"{prefix}.layers.{i}")
            for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual)
        x, _ = self.norm(x, residual)
        return x


class DeaMoEForCausalLMVLLM(nn.Module):
    """vLLM counterpart of deamoe.model.lm.DeaMoEForCausalLM (architecture 'DeaMoEForCausalLM')."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.model = DeaMoEModelVLLM(vllm_config=vllm_config, prefix=_join(prefix, "model"))
        self.lm_head = ParallelLMHead(
            config.vocab_size, config.hidden_size, prefix=_join(prefix, "lm_head")
        )
        if config.tie_word_embeddings:
            self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        self.logits_processor = LogitsProcessor(config.vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        buffers = dict(self.named_buffers())
        loaded: set[str] = set()
        for name, tensor in weights:
            if self.config.tie_word_embeddings and name == "lm_head.weight":
                continue
            module, _, leaf = name.rpartition(".")
            stem, _, proj = module.rpartition(".")
            if proj in _QKV:  # model.layers.N.self_attn.q_proj.weight -> stacked qkv_proj
                target = f"{stem}.qkv_proj.{leaf}"
                param = params[target]
                param.weight_loader(param, tensor, _QKV[proj])
                loaded.add(target)
            elif name in params:
                param = params[name]
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
                loaded.add(name)
            elif name in buffers:  # expert_bias: selection-only balancing bias
                buffers[name].copy_(tensor.to(buffers[name].dtype))
            else:
                raise ValueError(f"checkpoint tensor {name!r} has no place in the vLLM model")
        for module in self.modules():
            if isinstance(module, DeaMoEFFN):
                module._sync()
        return loaded


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
