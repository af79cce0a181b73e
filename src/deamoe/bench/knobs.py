"""The microbenchmark's knobs: which GEMMs a layer has, the BLOCK_M values a grouping can take,
and the {knob: value} dicts (tile names, BLOCK_M, stream switches) that become MoETiles /
DeaMoETiles -- written into microbench.csv as `knobs_name` and read back by `parse_knobs`."""

from __future__ import annotations

import dataclasses


GEMM_STAGES = {"moe": ("w13", "w2"), "deamoe": ("dept_up", "expert_up", "expert_down", "dept_down")}
EXPERT_STAGES = {"moe": ("w13", "w2"), "deamoe": ("expert_up", "expert_down")}
# a group holds at most one row per token, so a BLOCK_M above next_pow2(batch) only adds padding:
# the search skips those (see block_m_values).  128-row department blocks let one program see
# all of a department's tokens at 128 tokens, so its weight tile streams once
BLOCK_M_KNOBS = {"moe": {"block_m": (16, 32, 64)},
                 "deamoe": {"dept_block_m": (16, 32, 64, 128), "expert_block_m": (16, 32)}}


def block_m_values(values, batch: int | None) -> tuple:
    if batch is None:
        return tuple(values)
    cap = max(16, 1 << (max(1, batch) - 1).bit_length())
    return tuple(v for v in values if v <= cap)


def make_tiles(shape, knobs: dict):
    """MoETiles / DeaMoETiles from a {knob: value} dict (GEMM stages map to tile names)."""
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.kernels.grouped_gemm import TileConfig

    cls = DeaMoETiles if shape.kind == "deamoe" else MoETiles
    switches = {f.name for f in dataclasses.fields(cls) if f.type in (bool, "bool")}
    parsed = {k: TileConfig.parse(v) if isinstance(v, str) else v for k, v in knobs.items()}
    for k in switches & set(parsed):  # written as 0 / 1 in the knob names
        parsed[k] = bool(parsed[k])
    return cls(**parsed)


def joint_knobs(shape, tile: str, block_m: int) -> dict:
    knobs = {stage: tile for stage in GEMM_STAGES[shape.kind]}
    knobs.update({k: block_m for k in BLOCK_M_KNOBS[shape.kind]})
    return knobs


def knobs_name(knobs: dict) -> str:
    return ";".join(f"{k}={v}" for k, v in knobs.items())


def parse_knobs(text: str) -> dict:
    """Inverse of knobs_name: 'w13=n64-k128-w4-s4;block_m=16' -> {'w13': ..., 'block_m': 16}."""
    out = {}
    for part in text.split(";"):
        key, value = part.split("=", 1)
        out[key] = int(value) if value.isdigit() else value
    return out
