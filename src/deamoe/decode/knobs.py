"""A decode step's tile choices as {knob: value}: the GEMMs' tile names (TileConfig.parse), the
BLOCK_M of each grouping and the stream switches -- the fields of MoETiles / DeaMoETiles.  The
microbenchmark's search varies them and writes its pick into microbench.csv as `knobs_name`
text, which `parse_knobs` and `make_tiles` turn back into the tiles a step runs on."""

from __future__ import annotations

import dataclasses

# the GEMMs of each layer (their MoETiles / DeaMoETiles fields), and those over the experts
GEMM_STAGES = {"moe": ("w13", "w2"), "deamoe": ("dept_up", "expert_up", "expert_down", "dept_down")}
EXPERT_STAGES = {"moe": ("w13", "w2"), "deamoe": ("expert_up", "expert_down")}


def make_tiles(shape, knobs: dict):
    """MoETiles / DeaMoETiles from a {knob: value} dict (GEMM stages map to tile names), for a
    layer of `shape` (a DeaMoE layer's operator: DeaMoETiles.operator_misfit)."""
    from deamoe.kernels.deamoe_decode import DeaMoETiles
    from deamoe.kernels.fused_moe import MoETiles
    from deamoe.kernels.tile_config import TileConfig

    cls = DeaMoETiles if shape.kind == "deamoe" else MoETiles
    switches = {f.name for f in dataclasses.fields(cls) if f.type in (bool, "bool")}
    tiles = {f.name for f in dataclasses.fields(cls) if f.type in (TileConfig, "TileConfig")}
    counts = [k for k, v in knobs.items() if k not in tiles and isinstance(v, str)]
    if counts:  # a count or switch given as text (a tile name, '-1', '2.5')
        raise ValueError(f"{counts[0]} is {knobs[counts[0]]!r}, not a whole number")
    parsed = {k: TileConfig.parse(v) if isinstance(v, str) else v for k, v in knobs.items()}
    on_off = [k for k in parsed if k in switches and parsed[k] not in (0, 1)]
    if on_off:  # bool() would take 7 as on
        raise ValueError(f"{on_off[0]} is {parsed[on_off[0]]!r}, not 0 or 1 (a switch)")
    for k in switches & set(parsed):  # written as 0 / 1 in the knob names
        parsed[k] = bool(parsed[k])
    made = cls(**parsed)
    why = made.operator_misfit(shape.operator) if shape.kind == "deamoe" else None
    if why:  # the layer would refuse them at its first launch, on the GPU
        raise ValueError(why)
    return made


def fit_knobs(shape, knobs: dict, fmt) -> dict:
    """A bf16 pick's knobs for the layer on FP8 weights of `fmt` (an Fp8Format; None: bf16, the
    knobs as given): each GEMM tile, a default one too, with BLOCK_K made to fit the scale
    blocks (deamoe.kernels.fp8.fit_tiles), as the decode path runs a layer that has no pick of
    its precision (deamoe.decode.picks.TilePicks.tiles); the tiles that fit keep their names."""
    from deamoe.kernels.fp8 import fit_tiles

    if fmt is None:
        return dict(knobs)
    tiles = make_tiles(shape, knobs)
    fitted = fit_tiles(tiles, fmt)
    changed = {f.name: getattr(fitted, f.name).name for f in dataclasses.fields(tiles)
               if getattr(fitted, f.name) != getattr(tiles, f.name)}
    return {**knobs, **changed}


def knobs_name(knobs: dict) -> str:
    return ";".join(f"{k}={v}" for k, v in knobs.items())


def parse_knobs(text: str) -> dict:
    """Inverse of knobs_name: 'w13=n64-k128-w4-s4;block_m=16' -> {'w13': ..., 'block_m': 16}."""
    out = {}
    for part in text.split(";"):
        key, value = part.split("=", 1)
        out[key] = int(value) if value.isdigit() else value
    return out


def checked_tiles(shape, text: str, where: str):
    """make_tiles(shape, parse_knobs(text)), or a ConfigError naming `where` and the text when it
    is not a knob set of that layer (a bad tile name, an unknown knob, a part without '=')."""
    from deamoe.errors import ConfigError

    try:
        return make_tiles(shape, parse_knobs(text))
    except (ValueError, TypeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}: {text!r} is not a knob set of the {shape.kind} layer "
                          f"({why})") from None
