"""A report artifact: one paper table or figure as the report shows it.

Each builder (deamoe.report.tables, ladder, decode_slo, train_throughput) returns an `Artifact`:
the table to show, the files its numbers came from (with their scale and hardware), notes, and a
status ("ok", or "not run" with the reason; then the table holds the paper's values alone so the
reader still sees what the reproduction is aiming at).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from deamoe.report.sources import Loaded

NOT_RUN = "not run"


@dataclass
class Artifact:
    key: str  # file stem under reports/tables/ (and figure name)
    title: str
    table: pd.DataFrame
    sources: list[Loaded] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: pd.DataFrame | None = None  # tidy data behind the figure, when there is one
    rows: pd.DataFrame | None = None  # the per-run rows behind the table, when a figure needs them

    @property
    def status(self) -> str:
        return "ok" if self.sources and all(s.ok for s in self.sources) else NOT_RUN

    @property
    def reason(self) -> str:
        return "; ".join(s.reason for s in self.sources if not s.ok)
