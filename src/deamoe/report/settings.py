"""The `report` section of the pipeline config (workflow/schemas/report.schema.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from deamoe.errors import ConfigError
from deamoe.settings import from_dict


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
