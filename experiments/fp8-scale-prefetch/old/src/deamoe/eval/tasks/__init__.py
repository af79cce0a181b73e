"""lm-eval task YAMLs: templates the runner copies into each run's results with data paths filled in."""
