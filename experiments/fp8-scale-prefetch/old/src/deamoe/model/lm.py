"""Decoder LM with MoE or DeaMoE FFNs, as a `transformers` model (config + PreTrainedModel).

Pre-norm decoder: RMSNorm -> RoPE attention (grouped-query) -> residual -> RMSNorm -> FFN ->
residual, repeated; final RMSNorm and LM head.  One class serves both architectures: the config's
`ffn_type` ("moe" | "deamoe") picks the FFN, so the baseline and DeaMoE differ in nothing else.
It is trained (deamoe.train), evaluated through lm-eval's HFLM (deamoe.eval) and served by vLLM
(deamoe.serve loads the same safetensors).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from deamoe.shapes import DeaMoEShape, MoEShape
from deamoe.errors import ConfigError
from deamoe.model.layers import IMPLS, DeaMoE, MoE, build_ffn, rms_norm
from deamoe.routing import distinct_departments, expert_counts, load_balance_loss, update_bias

LOAD_BALANCE = ("aux_loss", "bias", "none")


class DeaMoEConfig(PretrainedConfig):
    """Decoder shape + FFN shape.  FFN fields mirror MoEShape / DeaMoEShape (see ffn_shape())."""

    model_type = "deamoe"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 128,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        num_key_value_heads: int | None = None,
        max_position_embeddings: int = 512,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-6,
        init_std: float = 0.02,
        expert_init_scale: float = 1.0,
        ffn_type: str = "deamoe",
        h_ffn: int = 64,
        n_expert: int = 16,
        k_expert: int = 4,
        n_dept: int = 4,
        k_dept: int = 2,
        operator: str = "silu",
        expert_init: str = "identity",
        dept_topk: str = "soft",
        routed_scaling: float = 1.0,
        n_shared: int = 0,
        shared_mult: int = 1,
        load_balance: str = "aux_loss",
        aux_loss_coef: float = 0.01,
        bias_update_rate: float = 1e-3,
        tie_word_embeddings: bool = False,
        ffn_impl: str = "torch",
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.init_std = init_std
        # init std of the routed experts' matrices (DeaMoE: its department matrices) = init_std x this
        self.expert_init_scale = expert_init_scale
        self.ffn_type = ffn_type
        self.h_ffn = h_ffn
        self.n_expert = n_expert
        self.k_expert = k_expert
        self.n_dept = n_dept
        self.k_dept = k_dept
        self.operator = operator
        self.expert_init = expert_init
        self.dept_topk = dept_topk
        self.routed_scaling = routed_scaling
        self.n_shared = n_shared  # always-active shared experts beside the routed ones
        self.shared_mult = shared_mult
        self.load_balance = load_balance
        self.aux_loss_coef = aux_loss_coef
        self.bias_update_rate = bias_update_rate
        self.ffn_impl = ffn_impl  # deamoe.model.layers.IMPLS: how the FFN computes (same function)
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
        self.validate_shapes()

    def validate_shapes(self) -> None:
        if self.ffn_type not in ("moe", "deamoe"):
            raise ConfigError(f"DeaMoEConfig.ffn_type={self.ffn_type!r} is not one of moe, deamoe")
        if self.load_balance not in LOAD_BALANCE:
            raise ConfigError(
                f"DeaMoEConfig.load_balance={self.load_balance!r} is not one of {', '.join(LOAD_BALANCE)}"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"DeaMoEConfig.hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"DeaMoEConfig.num_attention_heads={self.num_attention_heads} must be divisible by "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.ffn_impl not in IMPLS:
            raise ConfigError(f"DeaMoEConfig.ffn_impl={self.ffn_impl!r} is not one of {', '.join(IMPLS)}")
        self.ffn_shape()  # raises ConfigError naming the bad FFN field

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def ffn_shape(self) -> MoEShape | DeaMoEShape:
        if self.ffn_type == "moe":
            return MoEShape(
                h=self.hidden_size,
                h_ffn=self.h_ffn,
                n_expert=self.n_expert,
                k_expert=self.k_expert,
                routed_scaling=self.routed_scaling,
                n_shared=self.n_shared,
                shared_mult=self.shared_mult,
            )
        return DeaMoEShape(
            h=self.hidden_size,
            h_ffn=self.h_ffn,
            n_dept=self.n_dept,
            n_expert=self.n_expert,
            k_dept=self.k_dept,
            k_expert=self.k_expert,
            operator=self.operator,
            expert_init=self.expert_init,
            dept_topk=self.dept_topk,
            routed_scaling=self.routed_scaling,
            n_shared=self.n_shared,
            shared_mult=self.shared_mult,
        )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x.float(), self.eps).to(x.dtype) * self.weight


def lm_loss(hidden: torch.Tensor, head: torch.Tensor, targets: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """Mean next-token cross-entropy of hidden states [..., h] under the LM head [V, h] against
    targets [...] (-100 ignored), in float32, `chunk` tokens at a time: the float32 logits of one
    chunk exist at once instead of those of the whole batch."""
    h = hidden.reshape(-1, hidden.shape[-1])
    y = targets.reshape(-1)
    total = sum(
        F.cross_entropy(F.linear(h[i:i + chunk], head).float(), y[i:i + chunk], ignore_index=-100, reduction="sum")
        for i in range(0, h.shape[0], chunk)
    )
    return total / (y != -100).sum().clamp_min(1)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float):
    """cos/sin tables [B, T, head_dim] for rotate-half RoPE (the Llama/vLLM 'neox' layout)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    )
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: DeaMoEConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=False)

    def forward(self, x, cos, sin, mask, cache: Cache | None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos[:, None], sin[:, None]), apply_rope(k, cos[:, None], sin[:, None])
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=self.n_kv != self.n_heads
        )
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class DecoderLayer(nn.Module):
    def __init__(self, config: DeaMoEConfig, layer_idx: int):
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_idx)
        self.post_attention_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = build_ffn(config.ffn_shape(), config.init_std, config.expert_init_scale, config.ffn_impl)

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_norm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_norm(x))


class DeaMoEPreTrainedModel(PreTrainedModel):
    config_class = DeaMoEConfig
    base_model_prefix = "model"
    _no_split_modules = ["DecoderLayer"]
    _supports_sdpa = True

    def _init_weights(self, module):
        std = self.config.init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, (MoE, DeaMoE)):
            module.init_own(init.normal_, init.copy_, init.zeros_)


class DeaMoEModel(DeaMoEPreTrainedModel):
    def __init__(self, config: DeaMoEConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        B, T = input_ids.shape
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=input_ids.device).expand(B, T)
        mask = None
        if attention_mask is not None or past > 0:
            # Explicit boolean mask [B, 1, T, past+T]: causal, plus key padding when given.
            q_pos = torch.arange(past, past + T, device=input_ids.device)
            k_pos = torch.arange(past + T, device=input_ids.device)
            mask = (k_pos[None, :] <= q_pos[:, None])[None, None].expand(B, 1, T, past + T)
            if attention_mask is not None:
                mask = mask & attention_mask[:, None, None, -(past + T):].bool()
                # A fully padded query row would give NaN; let it attend to itself.
                mask = mask | (k_pos[None, :] == q_pos[:, None])[None, None]
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, past_key_values)
        return self.norm(x)


class DeaMoEForCausalLM(DeaMoEPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: DeaMoEConfig):
        super().__init__(config)
        self.model = DeaMoEModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    loss_fn = staticmethod(lm_loss)

    def compile_layers(self) -> None:
        """torch.compile each decoder layer and the loss (whole-model compile would trace the
        Hugging Face cache and mask handling too); before FSDP2 wraps the layers."""
        for layer in self.model.layers:
            layer.compile()
        self.loss_fn = torch.compile(lm_loss)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def ffn_layers(self) -> list[MoE | DeaMoE]:
        return [layer.mlp for layer in self.model.layers]

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        targets: torch.LongTensor | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """labels: Hugging Face's convention (shifted here; the loss adds the balance loss when
        training with aux_loss).  targets: the next token of every position (the trainer's batches):
        the loss is the cross-entropy alone and no logits are returned."""
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        hidden = self.model(input_ids, attention_mask, position_ids, past_key_values, use_cache)
        if targets is not None:
            return CausalLMOutputWithPast(loss=self.loss_fn(hidden, self.lm_head.weight, targets))
        logits = self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)
        loss = None
        if labels is not None:
            loss = self.loss_fn(hidden[:, :-1], self.lm_head.weight, labels[:, 1:])
            if self.training and self.config.load_balance == "aux_loss":
                loss = loss + self.config.aux_loss_coef * self.aux_loss()
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, past_key_values=past_key_values if use_cache else None
        )

    # Load balancing and the routing statistics see the routed experts only: shared experts take
    # every token and have no router column.
    def aux_loss(self) -> torch.Tensor:
        """Mean over layers of the Switch load-balancing loss of the last forward."""
        losses = [
            load_balance_loss(m.last_logits, m.last_ids, m.shape.n_expert)
            for m in self.ffn_layers()
            if m.last_logits is not None
        ]
        return torch.stack(losses).mean()

    @torch.no_grad()
    def update_balance_bias(self) -> None:
        """After an optimiser step with load_balance='bias': nudge each layer's expert bias."""
        for m in self.ffn_layers():
            if m.last_ids is not None:
                update_bias(m.expert_bias, expert_counts(m.last_ids, m.shape.n_expert), self.config.bias_update_rate)

    @torch.no_grad()
    def routing_stats(self) -> dict[str, torch.Tensor]:
        """Routing statistics of the last forward, averaged over layers: 0-d tensors on the
        model's device (no host sync; a reader calls float() when it needs the number)."""
        distinct, imbalance = [], []
        for m in self.ffn_layers():
            if m.last_ids is None:
                continue
            counts = expert_counts(m.last_ids, m.shape.n_expert).float()
            imbalance.append(counts.max() / counts.mean().clamp_min(1e-9))
            if isinstance(m, DeaMoE):
                s = m.shape
                distinct.append(distinct_departments(m.last_ids, s.n_dept, s.experts_per_dept).float().mean())
        stats = {"max_load_over_mean": torch.stack(imbalance).mean()} if imbalance else {}
        if distinct:
            stats["mean_distinct_departments"] = torch.stack(distinct).mean()
        return stats
