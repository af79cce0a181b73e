"""Write the report: reports/tables/*.{md,csv,html}, reports/figures/*.{png,svg}, reports/index.md.

Reads only results/ and reports/measured/ (through `tables`); every output file is written every
time (a stage that did not run gives "not run" rows and panels), so the workflow can declare them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from deamoe.errors import ConfigError
from deamoe.io import staging_dir, write_csv, write_text
from deamoe.provenance import provenance
from deamoe.report import figures, headline, ladder, tables, tokens_axis
from deamoe.report.artifact import Artifact
from deamoe.report.train_throughput import train_throughput
from deamoe.parse import from_dict

TABLES = ("table1", "figure2", "figure3", "figure3_slo", "figure3_slo_decode", "figure4_5",
          "figure4_5_fp8", "decode_tpot", "vllm_peer", "table2", "table3", "table4", "pretrain", "pretrain_gpu",
          "table2_gpu", "table3_gpu", "table4_gpu", "tokens_axis", "train_throughput")
PROV_COLUMNS = ("profile", "model_size", "tokens", "device", "versions", "git_sha", "date")
# per-row provenance columns some stages write into their tables: shown once, in the
# "Scale and hardware" section, instead of in every row of the displayed table
ROW_PROVENANCE = ("profile", "device", "gpu", "git_sha", "date", "python", "torch", "triton",
                  "transformers", "vllm", "lm_eval")


def _shown(art: Artifact) -> pd.DataFrame:
    return art.table.drop(columns=[c for c in ROW_PROVENANCE if c in art.table.columns])


@dataclass
class ReportSettings:
    """The `report` section of the pipeline config (schema: workflow/schemas/report.schema.yaml)."""

    measured_gpu: str = "h200"
    dpi: int = 150
    quality_sizes: tuple[str, ...] = ("small", "medium", "large")  # the GPU ladder's sizes, in order

    @classmethod
    def from_config(cls, cfg: dict) -> "ReportSettings":
        """From the whole pipeline config (the shared loader checks keys and types)."""
        out = from_dict(cls, (cfg or {}).get("report"), "report")
        if not 50 <= out.dpi <= 600:
            raise ConfigError(f"report.dpi: {out.dpi} out of range 50..600")
        return out


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}" if abs(v) >= 1e-3 else f"{v:.3e}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub markdown table (no extra dependency)."""
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def _provenance_frame(art: Artifact) -> pd.DataFrame:
    rows = []
    for src in art.sources:
        rows.append({"source": str(src.path), "status": src.status,
                     "reason": src.reason, **src.prov.as_dict()})
    return pd.DataFrame(rows)


def _table_markdown(art: Artifact) -> str:
    status = "reproduced" if art.status == "ok" else f"**not run**: {art.reason}"
    if art.status == "ok" and art.sources[0].reason:  # e.g. committed GPU numbers shown
        status = art.sources[0].reason
    parts = [f"# {art.title}", "", f"Status: {status}", "", markdown_table(_shown(art)), ""]
    parts += [f"- {n}" for n in art.notes if n]
    parts += ["", "## Scale and hardware of these numbers", "",
              markdown_table(_provenance_frame(art)), ""]
    return "\n".join(parts)


_HTML_STYLE = """<style>
body { font-family: sans-serif; font-size: 13px; margin: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
.notrun { color: #b22222; font-weight: bold; }
</style>"""


def _table_html(art: Artifact) -> str:
    """The same page as the markdown, as HTML: the HTML report shows it inline."""
    import html

    status = ("reproduced" if art.status == "ok"
              else f'<span class="notrun">not run</span>: {html.escape(art.reason)}')
    if art.status == "ok" and art.sources[0].reason:
        status = html.escape(art.sources[0].reason)
    shown = _shown(art)
    shown = shown.map(_cell) if hasattr(shown, "map") else shown.applymap(_cell)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in art.notes if n)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(art.title)}"
            f"</title>{_HTML_STYLE}</head><body><h2>{html.escape(art.title)}</h2>"
            f"<p>Status: {status}</p>{shown.to_html(index=False, escape=True)}<ul>{notes}</ul>"
            "<h3>Scale and hardware of these numbers</h3>"
            f"{_provenance_frame(art).to_html(index=False, escape=True)}</body></html>\n")


def _table_csv(art: Artifact) -> pd.DataFrame:
    """The shown table with the scale and hardware of its numbers on every row; a column of the
    table's own (figure2's and table4's tokens: each row's) keeps its values."""
    out = _shown(art).copy()
    src = art.sources[0]
    out["status"] = src.status
    out["source"] = str(src.path)
    for col in PROV_COLUMNS:
        if col not in out.columns:
            out[col] = getattr(src.prov, col)
    return out


def report_outputs(out: Path) -> list[Path]:
    """Every file `write_report` writes under `out`."""
    tables = [out / "tables" / f"{key}.{ext}" for key in TABLES for ext in ("md", "csv", "html")]
    figs = [out / "figures" / f"{name}.{ext}" for name in figures.FIGURES for ext in ("png", "svg")]
    return tables + figs + [out / "index.md", out / "workflow.rst", out / "provenance.csv",
                            out / "provenance.html"]


def write_report(results: Path, measured_root: Path, out: Path, settings: ReportSettings,
                 profile: str | None = None, description: str = "") -> list[Path]:
    """Build every table and figure, the index and the HTML report's front page (the headline,
    then `description`: reStructuredText); returns the paths written.  The report is built in a
    private folder beside `out` and moved in as a whole at the end, so a stopped build (Ctrl-C a
    few seconds in) leaves the earlier report, or none, never new tables beside old figures."""
    out = Path(out)
    with staging_dir(out, publish=True) as stage:
        written = _build(Path(results), Path(measured_root), stage, settings, profile, description)
    return [out / path.relative_to(stage) for path in written]


def _build(results: Path, measured_root: Path, out: Path, settings: ReportSettings,
           profile: str | None, description: str) -> list[Path]:
    from deamoe.report.sources import resolved_profile

    measured = Path(measured_root) / settings.measured_gpu
    profile = profile or resolved_profile(results)
    arts = {a.key: a for a in tables.build_all(results, measured, profile)
            + ladder.build(results, measured, profile, tuple(settings.quality_sizes))
            + [tokens_axis.tokens_axis(results, measured, profile), train_throughput(measured)]}
    written = []
    for key in TABLES:
        art = arts[key]
        md, csv = out / "tables" / f"{key}.md", out / "tables" / f"{key}.csv"
        page = out / "tables" / f"{key}.html"
        write_text(md, _table_markdown(art))
        write_text(page, _table_html(art))
        write_csv(csv, _table_csv(art))
        written += [md, csv, page]
    written += figures.draw_all(arts, out / "figures", dpi=settings.dpi)
    claims = headline.headline(arts)
    index, front = out / "index.md", out / "workflow.rst"
    write_text(index, _index(arts, profile, claims))
    write_text(front, headline.front_page(claims, description))
    prov = pd.concat([_provenance_frame(a).assign(artifact=a.title) for a in arts.values()],
                     ignore_index=True)
    write_csv(out / "provenance.csv", prov)
    write_text(out / "provenance.html",
               f"<!doctype html><html><head><meta charset='utf-8'>{_HTML_STYLE}</head><body>"
               f"<h2>Where every number came from</h2>{prov.to_html(index=False)}</body></html>\n")
    return written + [index, front, out / "provenance.csv", out / "provenance.html"]


def _index(arts: dict, profile: str | None, claims: list) -> str:
    me = provenance()
    lines = ["# DeaMoE reproduction report", "", headline.markdown(claims),
             "## Every artifact", "",
             f"Profile: {profile or 'not recorded'}. Report built {me['date']} at git "
             f"{me['git_sha']}. Each table's page lists the scale (profile, model size, tokens) "
             "and hardware (device, versions, git sha, date) of its numbers.", "",
             "| artifact | status | table | figure |", "|---|---|---|---|"]
    fig_of = {"figure2": "figure2_loading", "figure3": "figure3_tpot",
              "figure3_slo_decode": "figure3_slo_decode",
              "figure4_5": "figure4_5_microbench", "figure4_5_fp8": "figure4_5_fp8",
              "table4": "table4_loss_curves", "table4_gpu": "table4_gpu_loss_curves",
              "pretrain": "pretrain_loss_curves", "pretrain_gpu": ("quality_gap", "quality_loss_curves"),
              "tokens_axis": tuple(tokens_axis.FIGURES)}
    for key in TABLES:
        art = arts[key]
        status = "reproduced" if art.status == "ok" else f"not run: {art.reason}"
        if art.status == "ok" and art.sources[0].reason:
            status = art.sources[0].reason
        names = fig_of.get(key, ())
        fig = " ".join(f"[png](figures/{n}.png) [svg](figures/{n}.svg)"
                       for n in ((names,) if isinstance(names, str) else names))
        lines.append(f"| {art.title} | {_cell(status)} | [md](tables/{key}.md) "
                     f"[csv](tables/{key}.csv) | {fig} |")
    return "\n".join(lines) + "\n"
