"""The `analysis` section of the pipeline config (workflow/schemas/analysis.schema.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from deamoe.errors import ConfigError
from deamoe.shapes import ALL_MODEL_NAMES, table1_row


@dataclass
class AnalysisSettings:
    """The `analysis` section of the pipeline config."""

    models: list[str] = field(default_factory=lambda: list(ALL_MODEL_NAMES))
    loading_tokens: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    )
    loading_trials: int = 64
    seed: int = 0

    def __post_init__(self):
        for m in self.models:
            try:
                table1_row(m)
            except ConfigError as exc:
                raise ConfigError(f"analysis.models: {exc}") from None
        if not self.loading_tokens or any(t < 1 for t in self.loading_tokens):
            raise ConfigError(f"analysis.loading_tokens={self.loading_tokens!r} must be integers >= 1")
        if self.loading_trials < 2:
            raise ConfigError(f"analysis.loading_trials={self.loading_trials} must be >= 2 "
                              "(a standard error needs two samples)")
