"""Where a number came from: git sha, library versions, device, date.

Every result file carries these fields so the report can state the hardware and software of each
number it shows.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import importlib.metadata
import platform
import subprocess
from pathlib import Path


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    # a copy without .git (e.g. the tree sent to a GPU machine) is told its commit by the caller
    if os.environ.get("DEAMOE_GIT_SHA"):
        return os.environ["DEAMOE_GIT_SHA"][:12]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def device_name(device: str | None = None) -> str:
    """Human-readable name of the device a result was produced on."""
    try:
        import torch

        if (device is None or str(device).startswith("cuda")) and torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except ImportError:
        pass
    return f"CPU ({platform.processor() or platform.machine()})"


def provenance(device: str | None = None, **extra) -> dict:
    """A flat dict of provenance fields to merge into result rows / JSON."""
    info = {
        "git_sha": git_sha(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": device_name(device),
        "python": platform.python_version(),
        "torch": version("torch"),
    }
    info.update(extra)
    return info
