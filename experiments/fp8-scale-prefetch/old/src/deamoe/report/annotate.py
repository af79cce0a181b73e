"""The text every report figure carries: a footer with the scale and hardware of its numbers,
and, for a stage that did not run, a panel saying so and why."""

from __future__ import annotations

import textwrap

from deamoe.report.artifact import Artifact


def footer(fig, art: Artifact, extra: str = "") -> None:
    lines = []
    for src in art.sources:
        p = src.prov
        if src.ok:
            lines.append(f"{src.path}: profile {p.profile}, model {p.model_size}, tokens {p.tokens}; "
                         f"{p.device}; {p.versions}; git {p.git_sha}; {p.date}")
        else:
            lines.append(f"not run: {src.reason}")
    if extra:
        lines.append(extra)
    width = int(fig.get_figwidth() * 19)  # characters of 6.5-pt text that fit across the figure
    text = "\n".join(textwrap.fill(line, width) for line in lines)
    # The figure grows by the footer's height, so a long list of sources never eats the plot
    footer_in = (text.count("\n") + 1) * 6.5 * 1.25 / 72 + 0.08
    fig.set_figheight(fig.get_figheight() + footer_in)
    fig.text(0.01, 0.005, text, fontsize=6.5, va="bottom", ha="left", color="0.3")
    fig.tight_layout(rect=(0, footer_in / fig.get_figheight(), 1, 1))


def not_run_panel(ax, art: Artifact) -> None:
    ax.text(0.5, 0.5, "reproduction not run:\n" + textwrap.fill(art.reason, 60),
            transform=ax.transAxes, ha="center", va="center", fontsize=9, color="firebrick",
            bbox=dict(facecolor="white", alpha=0.9, edgecolor="firebrick"))
