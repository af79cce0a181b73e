"""The report's headline: one line per paper claim -- the paper's value, the reproduced value, the
scale of the reproduced number and a verdict -- computed from the report's tables, so a reader
has the answer before the links.  The paper's values come from deamoe.paper through the tables
(or from deamoe.paper itself); the thresholds of the verdicts are below and are stated under the
headline.  reports/index.md starts with it (markdown) and so does the HTML report's front page
(reStructuredText, `front_page`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from deamoe import paper
from deamoe.report.artifact import NOT_RUN, Artifact
from deamoe.report.tokens_axis import gap_text

RATIO_TOL = 0.005  # Table 1's ratios are printed to 3 decimals
BAND_TOL = 0.02  # Figure 2's loaded-weight band, each end
SPEEDUP_SHARE = 0.95  # a speedup or gain counts as reproduced at >= 95% of the paper's
PAPER_MODELS = tuple(row[0] for row in paper.TABLE1)
RULES = (f"Verdicts: Table 1 ratios within +-{RATIO_TOL} of the paper's; Figure 2's band within "
         f"{100 * BAND_TOL:.0f} points at both ends; speedups and gains at least {SPEEDUP_SHARE:.0%} of the "
         "paper's; quality by the paired held-out loss difference against its seed noise; "
         "Table 4 by the rank of variant No.1.")


@dataclass(frozen=True)
class Claim:
    claim: str
    paper: str
    reproduced: str
    scale: str
    verdict: str


def _devices(art: Artifact) -> str:
    """Every device the artifact's read sources name, in the order they first appear: a table
    joined from runs on two kinds of GPU names both."""
    names = [d for s in art.sources if s.ok for d in s.prov.device.split("; ")]
    return "; ".join(dict.fromkeys(d for d in names if d and d != "not recorded")) or "not recorded"


def _scale(art: Artifact) -> str:
    """Where the artifact's numbers came from, in a few words."""
    src = next((s for s in art.sources if s.ok), None)
    if src is None:
        return "-"
    p = src.prov
    parts = [f"profile {p.profile}" if p.profile != "not recorded" else "", p.model_size,
             f"{p.tokens} tokens" if p.tokens not in ("n/a", "not recorded") else "", _devices(art)]
    text = ", ".join(x for x in parts if x and x != "not recorded")
    return text + (" (committed)" if "showing committed" in (src.reason or "") else "")


def _not_run(claim: str, paper_value: str, art: Artifact) -> Claim:
    return Claim(claim, paper_value, NOT_RUN, "-", f"{NOT_RUN}: {art.reason}")


def _share_verdict(pairs: list[tuple[str, float, float]]) -> str:
    """'reproduced' where every (name, reproduced, paper) reaches SPEEDUP_SHARE of the paper's."""
    short = [name for name, got, want in pairs if not got >= SPEEDUP_SHARE * want]
    if not short:
        return "reproduced"
    if len(short) == len(pairs):
        return "not reproduced"
    return f"partly: below at {', '.join(short)}"


def budget_match(arts: dict) -> Claim:
    art = arts["table1"]
    t = art.table[art.table["model"].isin(PAPER_MODELS)]
    want = f"{_span(t[['paper_flops_ratio', 'paper_params_ratio']])}"
    claim = "DeaMoE matches its baseline's FFN FLOPs and parameters (Table 1, ratios)"
    if art.status != "ok":
        return _not_run(claim, want, art)
    got = t[["flops_ratio", "params_ratio"]].astype(float)
    off = [m for m, (f, p), (pf, pp) in zip(t["model"], got.values,
                                              t[["paper_flops_ratio", "paper_params_ratio"]].values)
           if abs(f - pf) > RATIO_TOL or abs(p - pp) > RATIO_TOL]
    verdict = "reproduced" if not off else f"differs at {', '.join(off)}"
    return Claim(claim, want, _span(got), _scale(art), verdict)


def _span(frame: pd.DataFrame) -> str:
    values = frame.astype(float).values.ravel()
    return f"{values.min():.3f}-{values.max():.3f}"


def loading(arts: dict) -> Claim:
    art = arts["figure2"]
    (lo, hi), (t0, t1) = paper.FIG2_DSV3_BAND["ratio"], paper.FIG2_DSV3_BAND["tokens"]
    model = paper.FIG2_DSV3_BAND["model"]
    claim = f"{model} loads fewer expert weights per step (Figure 2, DeaMoE / baseline, {t0}-{t1} tokens)"
    want = f"{lo:.1%}-{hi:.1%}"
    if art.status != "ok" or model not in art.table.columns:
        return _not_run(claim, want, art)
    t = art.table
    band = t.loc[(t["tokens"] >= t0) & (t["tokens"] <= t1), model].astype(float)
    ok = abs(band.min() - lo) <= BAND_TOL and abs(band.max() - hi) <= BAND_TOL
    return Claim(claim, want, f"{band.min():.1%}-{band.max():.1%}", _scale(art),
                 "reproduced" if ok else "not reproduced")


def layer_speedup(arts: dict) -> Claim:
    art = arts["figure4_5"]
    models = [m for gpu, m in paper.FIG45 if gpu == "H100"]
    peaks = {m: max(paper.FIG45[("H100", m)].values()) for m in models}
    want = ", ".join(f"{m} {v:.2f}x" for m, v in peaks.items()) + " (H100)"
    claim = "DeaMoE's decode layer is faster at small batches (Figures 4/5, peak speedup over batch)"
    if art.status != "ok":
        return _not_run(claim, want, art)
    t = art.table[art.table["model"].isin(models)]
    got = t.groupby("model")["speedup"].max().astype(float)
    pairs = [(m, got[m], peaks[m]) for m in models if m in got]
    return Claim(claim, want, ", ".join(f"{m} {v:.2f}x" for m, v, _ in pairs), _scale(art),
                 _share_verdict(pairs))


def serving_speedup(arts: dict) -> Claim:
    art = arts["figure3"]
    best = max(paper.FIG3_A40_SPEEDUP, key=paper.FIG3_A40_SPEEDUP.get)
    want = f"{paper.FIG3_A40_SPEEDUP[best]:.2f}x at concurrency {best} (A40, vLLM)"
    claim = "Serving DeaMoE-7B lowers TPOT (Figure 3, peak speedup over concurrency)"
    if art.status != "ok" or "speedup" not in art.table.columns:
        return _not_run(claim, want, art)
    t = art.table.dropna(subset=["speedup"])
    top = t.loc[t["speedup"].astype(float).idxmax()]
    return Claim(claim, want, f"{float(top['speedup']):.2f}x at concurrency "
                 f"{int(top['concurrency'])}", _scale(art),
                 _share_verdict([("serving", float(top["speedup"]), paper.FIG3_A40_SPEEDUP[best])]))


def decode_step_speedup(arts: dict) -> Claim:
    art = arts["decode_tpot"]
    best = max(paper.FIG3_A40_SPEEDUP, key=paper.FIG3_A40_SPEEDUP.get)
    want = f"{paper.FIG3_A40_SPEEDUP[best]:.2f}x at concurrency {best} (A40, vLLM)"
    claim = "The same at GPU scale: model-level decode step (Figure 3, peak TPOT speedup)"
    t = art.table
    if art.status != "ok" or not {"baseline_tpot_ms", "deamoe_tpot_ms"} <= set(t.columns):
        return _not_run(claim, want, art)
    speedup = t["baseline_tpot_ms"].astype(float) / t["deamoe_tpot_ms"].astype(float)
    top = t.loc[speedup.idxmax()]
    return Claim(claim, want, f"{speedup.max():.2f}x at batch {int(top['batch'])} ({top['model']})",
                 _scale(art), _share_verdict([("decode", speedup.max(),
                                               paper.FIG3_A40_SPEEDUP[best])]))


def budget_gain(arts: dict) -> Claim:
    art = arts["figure3_slo_decode"]
    want = ", ".join(f"{g:.2f}x at {b} ms" for b, _, _, g in paper.FIG3_SLO) + " (A40, vLLM)"
    claim = "A larger batch fits the same TPOT budget (Figure 3 right, batch gain)"
    t = art.table
    if art.status != "ok" or "paper_gain" not in t.columns:
        return _not_run(claim, want, art)
    rows = t.dropna(subset=["paper_gain"])
    pairs, parts = [], []
    for _, r in rows.iterrows():
        lower = str(r["deamoe_side"]).startswith("not measured")
        gain = float(r["interp_batch_gain"])
        parts.append(f"{'>=' if lower else ''}{gain:.2f}x at the baseline's batch "
                     f"{int(r['paper_baseline_batch'])}")
        pairs.append((f"batch {int(r['paper_baseline_batch'])}", gain, float(r["paper_gain"])))
    return Claim(claim, want, ", ".join(parts) or NOT_RUN, _scale(art),
                 _share_verdict(pairs) if pairs else NOT_RUN)


def quality(arts: dict) -> Claim:
    art = arts["pretrain_gpu"]
    acc = {m: sum(paper.TABLE2[m].values()) / len(paper.TABLE2[m]) for m in paper.TABLE2}
    want = f"mean accuracy {acc['deamoe'] - acc['baseline']:+.2f} points (Table 2, 7.3B)"
    claim = "DeaMoE's quality matches its baseline's at equal budget (Tables 2-3)"
    t = art.table
    if art.status != "ok" or "diff DeaMoE - baseline" not in t.columns:
        return _not_run(claim, want, art)
    done = t[t["verdict"] != NOT_RUN]
    got = ", ".join(f"{r['size']} {r['diff DeaMoE - baseline']:+.3f}" for _, r in done.iterrows())
    comparable = done["verdict"].str.startswith(("within", "DeaMoE ahead"))
    ops = done.groupby(done["DeaMoE operator"])["verdict"].apply(
        lambda v: v.str.startswith(("within", "DeaMoE ahead")).all())
    if comparable.all():
        verdict = "reproduced"
    elif not comparable.any():
        verdict = "not reproduced: DeaMoE behind beyond seed noise"
    else:
        verdict = ("partly: comparable with " + ", ".join(o for o, v in ops.items() if v)
                   + "; behind with " + ", ".join(o for o, v in ops.items() if not v))
    sizes = f"{done['params baseline'].min() / 1e6:.1f}M-{done['params baseline'].max() / 1e6:.1f}M params"
    per_param = (f", {done['tokens per param'].min():.2g}-{done['tokens per param'].max():.2g} tokens per "
                 "parameter" if "tokens per param" in done else "")
    device = _scale(art).split(", ")[-1]
    return Claim(claim, want, f"held-out loss DeaMoE - baseline: {got}",
                 f"{sizes}{per_param}, {device}", verdict)


PAPER_RATIO_BAND = 1.5  # a length within x1.5 of the paper's tokens per parameter is judged as at it


def longer_training(arts: dict) -> Claim:
    """The same comparison along the tokens axis, judged where the paper makes its claim: at the
    length nearest the paper's tokens per parameter (within PAPER_RATIO_BAND of it), else at the
    line's longest; the longest length is shown beside it, and where the gap closes later, from
    which length on."""
    art = arts["tokens_axis"]
    ratio = paper.PRETRAIN_TOKENS_PER_PARAM
    claim = "The same along training length (tokens axis)"
    want = (f"comparable quality at about {ratio:.0f} tokens per parameter "
            f"({paper.PRETRAIN_PARAMS / 1e9:.1f}B, {paper.PRETRAIN_TOKENS / 1e9:.0f}B tokens)")
    t = art.table
    if art.status != "ok" or "diff DeaMoE - baseline" not in t.columns:
        return _not_run(claim, want, art)
    done = t[t["verdict"] != NOT_RUN]
    if done.empty:
        return _not_run(claim, want, art)
    at = lambda r: f"{gap_text(r)} at {r['tokens per param']:.2g} tokens/param"  # noqa: E731
    fine = lambda r: r["verdict"].startswith(("within", "DeaMoE ahead"))  # noqa: E731
    got, behind, level, closes, short, longest, judged_lines = [], [], [], [], [], [], 0
    for (size, op), whole in done.sort_values("tokens").groupby(["size", "DeaMoE operator"], sort=False):
        # judged only where seeds give a spread; a length of one seed so far is shown, not judged
        name, line = f"{size} ({op})", whole[whole["seeds"] > 1].reset_index(drop=True)
        first_seeds = [at(r) + " (not judged)" for _, r in whole[whole["seeds"] < 2].iterrows()]
        if line.empty:
            got.append(f"{name} " + ", ".join(first_seeds))
            longest.append(whole.iloc[-1])
            continue
        judged_lines += 1
        distance = (line["tokens per param"] / ratio).map(lambda x: abs(math.log(x)))
        near, last = line.loc[distance.idxmin()], line.iloc[-1]
        at_paper = distance.min() <= math.log(PAPER_RATIO_BAND)
        got.append((f"{name} {at(near)}, {at(last)}" if at_paper and near.name != last.name
                    else f"{name} {at(last)}") + "".join(f", {x}" for x in first_seeds))
        judged = near if at_paper else last
        short += [] if at_paper else [f"{name} at {last['tokens per param']:.2g}"]
        longest.append(whole.iloc[-1])  # the scale: every length shown
        if fine(judged):
            level.append(f"{name} at {judged['tokens per param']:.2g} tokens/param ({int(judged['seeds'])} seeds)")
        else:
            behind.append(name)
            start = len(line)  # the first length from which every longer one is fine
            while start and fine(line.loc[start - 1]):
                start -= 1
            if start < len(line):
                closes.append(f"{name} from {line.loc[start, 'tokens per param']:.2g} tokens/param")
    verdict = ("not judged: one seed at every length so far" if not judged_lines
               else "reproduced (within seed noise or ahead)" if not behind else "not reproduced: DeaMoE behind"
               if len(behind) == judged_lines else "partly: behind at " + ", ".join(behind)
               + "; within seed noise or ahead: " + ", ".join(level))
    if closes:
        verdict += "; within seed noise with longer training: " + ", ".join(closes)
    if short:
        verdict += f"; judged at the longest length, short of {ratio:.0f} tokens/param: " + ", ".join(short)
    last = pd.DataFrame(longest)
    params = last["tokens"] / last["tokens per param"]
    scale = (f"{params.min() / 1e6:.1f}M-{params.max() / 1e6:.1f}M params, up to "
             f"{last['tokens'].max() / 1e6:.0f}M tokens per run, {_devices(art)}")
    return Claim(claim, want, "held-out loss DeaMoE - baseline (2 standard errors), at the length nearest the "
                 f"paper's tokens per parameter and at the longest: {'; '.join(got)}", scale, verdict)


def ablation(arts: dict) -> Claim:
    art = arts["table4_gpu"] if arts["table4_gpu"].status == "ok" else arts["table4"]
    best = min(paper.TABLE4, key=lambda r: r[-1])
    want = f"{best[0]} ({best[1]}) lowest, loss {best[-1]}"
    claim = "DeaMoE's choices give the lowest loss among the ablation variants (Table 4)"
    t = art.table
    column = "loss last N" if "loss last N" in t.columns else "loss_last_n"
    if art.status != "ok" or column not in t.columns:
        return _not_run(claim, want, art)
    loss = pd.to_numeric(t.set_index("variant")[column], errors="coerce").dropna()
    if loss.empty:
        return _not_run(claim, want, art)
    rank = int(loss.rank(method="min").get(best[0], 0))
    got = f"{loss.idxmin()} lowest ({loss.min():.3f}); {best[0]} ranks {rank} of {len(loss)}"
    return Claim(claim, want, got, _scale(art),
                 "reproduced" if rank == 1 else "not reproduced")


CLAIMS = (budget_match, loading, layer_speedup, serving_speedup, decode_step_speedup,
          budget_gain, quality, longer_training, ablation)


def headline(arts: dict[str, Artifact]) -> list[Claim]:
    return [claim(arts) for claim in CLAIMS]


def markdown(claims: list[Claim]) -> str:
    lines = [f"- **{c.claim}** -- paper {c.paper}; reproduced {c.reproduced} ({c.scale}): "
             f"**{c.verdict}**" for c in claims]
    return "\n".join(["## Headline", "", *lines, "", RULES, ""])


def front_page(claims: list[Claim], description: str = "") -> str:
    """The HTML report's front page (reStructuredText): the headline, then `description`."""
    def rst(text: str) -> str:
        return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`")

    lines = [f"- **{rst(c.claim)}** -- paper {rst(c.paper)}; reproduced {rst(c.reproduced)} "
             f"({rst(c.scale)}): **{rst(c.verdict)}**" for c in claims]
    # Snakemake renders the page as a Jinja2 template first: the computed text is kept raw
    return "\n".join(["{% raw %}", "Headline", "========", "", *lines, "", rst(RULES),
                      "{% endraw %}", "", description])
