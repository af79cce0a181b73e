"""`bench variants` before any GPU work: every knob set it would time -- each point's committed
pick and each variant on it -- is one the layer's launches take on the run's weights, so a
mistake is one line naming the variant (or pick), the point and the tile, not a row of NaN
after the points timed before it.

The picks of a table without a weight_dtype column are bf16 picks.  Run on FP8 weights (--weight-
dtype fp8 / fp8-w8a8), each of their GEMM tiles gets BLOCK_K fitted to the scale blocks, as the
decode path runs a layer without a pick of its precision (deamoe.decode.knobs.fit_knobs); the
variants apply to those fitted picks, and the tiles that changed are said before the run.
"""

from __future__ import annotations

from pathlib import Path


def check_variants(sets: dict, rows: dict, precision: str = "bf16", table="") -> list[str]:
    """Each variant on the committed picks of each point ({(model, batch): the table's row}),
    and those picks, as a knob set of its layer whose tiles the launches take on weights of
    `precision` (launch_misfit): a ConfigError naming it (a bad value, a '+sfx' making no tile
    name, a BLOCK_K off the scale blocks).  Returns the lines saying how `table`'s bf16 picks
    were fitted to FP8 weights (none for bf16, or for a table of that precision's picks)."""
    from deamoe.bench.settings import MicrobenchSettings
    from deamoe.bench.tools import apply_variant
    from deamoe.decode.knobs import fit_knobs, make_tiles, parse_knobs
    from deamoe.errors import ConfigError
    from deamoe.shapes import table1_row

    fmt = MicrobenchSettings().fp8_format(precision)  # as `variants` makes the weights
    # a table without weight_dtype holds bf16 picks; on FP8 weights they run fitted
    fitted = fmt is not None and not any("weight_dtype" in row for row in rows.values())
    notes = []
    for (model, batch), row in rows.items():
        at = f"{model}:{batch}"
        for shape in (table1_row(model).baseline, table1_row(model).deamoe):
            text = row.get("baseline_tile" if shape.kind == "moe" else "deamoe_tile")
            if not isinstance(text, str):
                continue
            try:
                picked = parse_knobs(text)
            except ValueError:  # 'failed' / 'library': the table's check lets them through,
                # but `variants` times the committed picks of both layers at every point
                what = (f"variant {next(iter(sets[shape.kind]))!r} at {at}: the table's"
                        if sets[shape.kind] else f"{table}: at {at} the")
                raise ConfigError(f"{what} {shape.kind} pick is {text!r}, no knob set to time; "
                                  "give points whose picks both layers have") from None
            runs = {"committed": {}, **sets[shape.kind]}
            for name, variant in runs.items():
                where = (f"{table}: the {shape.kind} pick at {at}" if name == "committed"
                         else f"variant {name!r} at {at}")
                try:
                    knobs = fit_knobs(shape, picked, fmt) if fitted else picked
                    tiles = make_tiles(shape, apply_variant(knobs, variant))
                except (ValueError, TypeError) as exc:
                    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise ConfigError(f"{where}: {why}") from None
                why = launch_misfit(shape, tiles, fmt)
                if why:
                    raise ConfigError(f"{where}: {why}")
            if fitted:
                notes += _fitted_notes(at, shape.kind, picked, fit_knobs(shape, picked, fmt))
    if fitted:
        notes.insert(0, _fitted_header(rows, precision, fmt, table, changed=bool(notes)))
    return notes


def _fitted_header(rows: dict, precision: str, fmt, table, changed: bool) -> str:
    """The line before the fitted tiles: bf16 picks run on FP8 weights, and (where the FP8
    table beside `table` has a pick of `precision` at every point) where those are."""
    from deamoe.bench.points import FP8_FILE
    from deamoe.bench.vllm_peer import PeerError
    from deamoe.bench.vllm_peer_run import checked_points

    own, hint = Path(table).with_name(FP8_FILE), ""
    if own.is_file() and own != Path(table):
        try:
            checked_points([f"{m}:{b}" for m, b in rows], own, precision)
            hint = f"; the {precision} picks: --table {own}"
        except PeerError:
            pass
    how = "these tiles changed:" if changed else "every tile fits as picked"
    return (f"bench variants: {table} holds bf16 picks; on {precision} weights they and the "
            f"variants on them run with each BLOCK_K fitted to the {fmt.block_n}x{fmt.block_k} "
            f"scale blocks, as the decode path runs a layer without a pick of its precision"
            f"{hint}; {how}")


def _fitted_notes(at: str, kind: str, picked: dict, fitted: dict) -> list[str]:
    """One line per layer whose tiles fit_knobs changed: each GEMM's picked and fitted tile."""
    changed = [f"{k} {picked.get(k, 'default')} -> {v}" for k, v in fitted.items()
               if picked.get(k) != v]
    return [f"  {at} {kind}: {', '.join(changed)}"] if changed else []


def launch_misfit(shape, tiles, fmt) -> str | None:
    """Why a launch of one of `tiles`' GEMMs (MoETiles, DeaMoETiles) on weights of `fmt` (an
    Fp8Format; None: bf16) would be refused, as grouped_gemm's operand check does
    (deamoe.kernels.fp8_quant.gemm_operands), or None: '-qo' / '-qs' only on w8a8 weights and
    not both on one tile, a '-qo' tile's groups within a scale block, each BLOCK_K within one
    scale block and one group of a quantised A (Fp8Format.fits), and a pre-quantised A of
    DeaMoE's expert up-projection in whole groups (preq_groups_fit)."""
    from deamoe.decode.knobs import GEMM_STAGES
    from deamoe.kernels.fp8 import FP8_MMA_MIN_K, preq_groups_fit, qout_readers

    w8a8 = fmt is not None and fmt.activations == "fp8"
    writer_of = {r: getattr(tiles, w) for w, r in qout_readers(tiles).items()
                 if hasattr(tiles, w) and hasattr(tiles, r)}
    for gemm in GEMM_STAGES[shape.kind]:
        t, w = getattr(tiles, gemm), writer_of.get(gemm)
        say = f"{gemm} tile {t.name}"
        if (t.qout or t.qscale) and not w8a8:
            return (f"{say}: '-qo' / '-qs' store the output quantised for the next GEMM, on "
                    f"fp8-w8a8 weights only, not {fmt.precision if fmt else 'bf16'}")
        if t.qout and t.qscale:
            return f"{say}: '-qo' and '-qs' are two ways to store one output; give one"
        if t.qout and fmt.block_k % t.block_n:
            return (f"{say}: a '-qo' tile's BLOCK_N {t.block_n} is its group, which must divide "
                    f"the scale blocks' block_k {fmt.block_k}")
        if fmt is None:
            continue
        # A's groups as the launch reads them (Fp8Format.a_group): a '-qo' writer's BLOCK_N, a
        # '-qs' writer's block_k, else block_k where A is quantised before the GEMM
        written = w if w8a8 and w is not None and (w.qout or w.qscale) else None
        a_group = fmt.a_group(t.preq, None if written is None else
                              written.block_n if written.qout else fmt.block_k)
        if not fmt.fits(t.block_k, a_group):
            rule = (f"it must divide {fmt.block_k}" if not w8a8 else
                    f"A in groups of {a_group}: it must divide "
                    f"{' and '.join(map(str, sorted({fmt.block_k, a_group})))}, >= {FP8_MMA_MIN_K}"
                    if a_group else f"A quantised in the main loop: it must be {fmt.block_k}")
            return (f"{say}: BLOCK_K {t.block_k} does not fit {fmt.precision} weights of "
                    f"{fmt.block_n}x{fmt.block_k} scale blocks ({rule})")
        f = shape.h_ffn  # expert_up reads the department output's up half at column f
        if a_group and gemm == "expert_up" and not preq_groups_fit(f, f, 2 * f, a_group):
            return (f"{say}: A quantised in groups of {a_group} needs h_ffn {f} a multiple of "
                    "them (the up half starts there)")
    return None
