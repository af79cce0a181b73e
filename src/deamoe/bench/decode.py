"""Model-level decode benchmark: one decode step of a whole decoder, baseline vs DeaMoE FFNs.

The GPU counterpart of Figure 3 where vLLM cannot run (the measuring H200 has no GPU build of
vLLM, and vLLM with its own torch is too large to carry there).  A pre-norm decoder with random bf16 weights: per layer RMSNorm -> QKV -> attention over
a static KV cache of `context` positions (the new token's K/V written into the last slot, so
every step reads the same cache size) -> output projection -> RMSNorm -> FFN (router +
deamoe.routing.route + the Triton kernels) ; then the LM head and a greedy argmax.  The whole
step is one CUDA graph; TPOT is the median replay time.  RoPE is left out (elementwise, a few
microseconds per step, the same for both models).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from deamoe.bench.layer_step import free_cuda_cache, time_fn
from deamoe.decode.step import ffn_step
from deamoe.decode.weights import random_weights


@dataclass
class DecoderShape:
    n_layers: int
    heads: int
    context: int
    vocab: int

    @classmethod
    def of(cls, s) -> "DecoderShape":
        """The decoder of the microbenchmark's settings (decode_layers, _heads, _context, _vocab)."""
        return cls(s.decode_layers, s.decode_heads, s.decode_context, s.decode_vocab)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)


class RandomDecoder:
    """Random-weight decoder whose FFN is `ffn_shape` (MoEShape or DeaMoEShape)."""

    def __init__(self, ffn_shape, dec: DecoderShape, max_batch: int, device="cuda", seed=0,
                 dtype=torch.bfloat16):
        h = ffn_shape.h
        self.shape, self.dec, self.h = ffn_shape, dec, h
        self.hd = h // dec.heads
        g = torch.Generator(device=device).manual_seed(seed)

        def mat(*size):
            return torch.randn(*size, generator=g, device=device, dtype=dtype).mul_(size[-1] ** -0.5)

        self.embed = torch.randn(dec.vocab, h, generator=g, device=device, dtype=dtype)
        self.lm_head = mat(dec.vocab, h)
        self.norm = torch.ones(h, device=device)
        self.layers = []
        for i in range(dec.n_layers):
            self.layers.append({
                "wqkv": mat(3 * h, h), "wo": mat(h, h),
                "ffn": random_weights(ffn_shape, device, dtype, seed=seed + 1000 + i),
                "k": torch.randn(max_batch, dec.heads, dec.context, self.hd, generator=g,
                                 device=device, dtype=dtype),
                "v": torch.randn(max_batch, dec.heads, dec.context, self.hd, generator=g,
                                 device=device, dtype=dtype),
            })

    def step(self, tokens: torch.Tensor, tiles=None, shared=None) -> torch.Tensor:
        B = tokens.shape[0]
        x = self.embed[tokens]
        for L in self.layers:
            a = _rms(x, self.norm)
            q, k, v = F.linear(a, L["wqkv"]).view(B, 3, self.dec.heads, 1, self.hd).unbind(1)
            kc, vc = L["k"][:B], L["v"][:B]
            kc[:, :, -1:].copy_(k)
            vc[:, :, -1:].copy_(v)
            o = F.scaled_dot_product_attention(q, kc, vc)
            x = x + F.linear(o.reshape(B, self.h), L["wo"])
            x = x + ffn_step(self.shape, L["ffn"], _rms(x, self.norm), tiles=tiles,
                             shared=shared)
        return F.linear(_rms(x, self.norm), self.lm_head).argmax(-1)


def decoder_bytes(shape, dec: DecoderShape, max_batch: int) -> int:
    """bf16 bytes a RandomDecoder holds: per layer QKV + output projection, the FFN (router,
    experts, shared experts) and the K/V caches of max_batch sequences; embedding and LM head."""
    from deamoe.analysis.budget import ffn_params

    h = shape.h
    layer = 4 * h * h + ffn_params(shape) + 2 * max_batch * dec.context * h
    return 2 * (dec.n_layers * layer + 2 * dec.vocab * h)


def check_decode_fits(models, batches, dec: DecoderShape, gpu_bytes: int) -> None:
    """A ConfigError naming the model whose decoder (baseline or DeaMoE, built one at a time)
    cannot fit the GPU's `gpu_bytes`, before any GPU work."""
    from deamoe.errors import ConfigError
    from deamoe.shapes import table1_row

    for model in models:
        row = table1_row(model)
        need = max(decoder_bytes(s, dec, max(batches)) for s in (row.baseline, row.deamoe))
        if need > gpu_bytes:
            raise ConfigError(
                f"microbench.decode_models: {model}: its decoder holds {need / 1e9:.1f} GB "
                f"({dec.n_layers} layers, microbench.decode_layers) > the GPU's "
                f"{gpu_bytes / 1e9:.1f} GB; lower decode_layers or drop the model")


def run_decode(models, batches, dec: DecoderShape, replays: int, device="cuda", tiles=None,
               seed=0, progress=None, shapes=None, shared=None) -> list[dict]:
    """Rows {model, ffn, batch, tpot_ms, tiles_batch} for the baseline and DeaMoE decoders of each
    model.

    tiles: optional deamoe.decode.picks.TilePicks (the microbenchmark's per-layer picks; a batch
    it did not measure runs the pick of the nearest measured batch, named in `tiles_batch`), or
    None for the default tiles; shapes: optional {model: (MoEShape, DeaMoEShape)} instead of the
    Table 1 presets (tests).  A layer with shared experts ("<model>+shared") runs them on the
    schedule `shared` (deamoe.bench.shared.SharedSchedules) picked at the nearest measured batch
    (`shared_stream`), else in line.
    """
    from deamoe.bench.shared import SharedSchedules
    from deamoe.shapes import table1_row

    shared = shared or SharedSchedules()

    rows = []
    for model in models:
        pair = (shapes or {}).get(model) or (table1_row(model).baseline, table1_row(model).deamoe)
        for kind, shape in zip(("baseline", "deamoe"), pair):
            net = RandomDecoder(shape, dec, max(batches), device, seed)
            for batch in batches:
                tokens = torch.randint(0, dec.vocab, (batch,), device=device)
                found = tiles.knobs(shape, batch) if tiles is not None else None
                t = tiles.tiles(shape, batch) if found else None
                sh = shared.tiles(model, kind, batch)
                with torch.no_grad():
                    timing = time_fn(lambda: net.step(tokens, t, sh), replays)
                rows.append({"model": model, "ffn": kind, "batch": batch,
                             "tpot_ms": timing.median_us / 1e3, "p10_ms": timing.p10_us / 1e3,
                             "p90_ms": timing.p90_us / 1e3,
                             "tiles_batch": found[0] if found else None,
                             **({"shared_stream": bool(sh and sh.stream)}
                                if shape.n_shared else {})})
                if progress is not None:
                    progress.update(1)
            del net
            free_cuda_cache()
    return rows


def tpot_table(rows: list[dict], prov: dict, dec: DecoderShape) -> list[dict]:
    """decode_tpot.csv: one row per (model, batch) with both TPOTs and the speedup."""
    import triton

    by = {(r["model"], r["batch"], r["ffn"]): r for r in rows}
    out = []
    for (model, batch, ffn), r in by.items():
        if ffn != "baseline" or (model, batch, "deamoe") not in by:
            continue
        d = by[(model, batch, "deamoe")]
        out.append({
            "model": model, "batch": batch, "baseline_tpot_ms": r["tpot_ms"],
            "deamoe_tpot_ms": d["tpot_ms"], "speedup": r["tpot_ms"] / d["tpot_ms"],
            "baseline_tiles_batch": r.get("tiles_batch"), "deamoe_tiles_batch": d.get("tiles_batch"),
            **({"baseline_shared_stream": r["shared_stream"],
                "deamoe_shared_stream": d["shared_stream"]} if "shared_stream" in r else {}),
            "layers": dec.n_layers, "heads": dec.heads, "context": dec.context, "vocab": dec.vocab,
            "gpu": prov["device"], "torch": prov["torch"], "triton": triton.__version__,
            "date": prov["date"], "git_sha": prov["git_sha"],
        })
    return out


def read_tpot(path):
    """A decode_tpot.csv as a DataFrame, validated like the committed one (deamoe.readers):
    a DataError naming the file, and the line of a bad value."""
    from deamoe.readers import read_table
    from deamoe.table_specs import TABLES

    return read_table(path, TABLES["decode_tpot.csv"], "decode_tpot table")


def merge_tpot(new, into) -> int:
    """Merge the decode_tpot.csv `new` into the table `into` (written in place; created if
    missing): rows of `new` replace those of the same (model, batch), the others are kept, sorted
    by model and batch.  Returns the number of rows written."""
    import pandas as pd

    from deamoe.io import write_csv

    add = read_tpot(new)
    old = read_tpot(into) if Path(into).exists() else add.iloc[:0]
    keys = set(zip(add["model"], add["batch"]))
    kept = old[[k not in keys for k in zip(old["model"], old["batch"])]]
    out = pd.concat([kept, add], ignore_index=True).sort_values(["model", "batch"])
    write_csv(into, out.reset_index(drop=True), replace_committed=True)  # both sides validated
    return len(out)
