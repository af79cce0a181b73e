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
import re
import subprocess
from pathlib import Path


UNCOMMITTED = "+uncommitted"  # after the sha: tracked files differ from that commit


@functools.lru_cache(maxsize=4)
def git_sha(where: Path = Path(__file__).resolve().parent) -> str:
    """The commit of the tree at `where` (12 hex digits), with UNCOMMITTED appended when tracked
    files differ from it: a number made from an edited tree does not pass for that commit's (a
    copy of the tree sent to a GPU machine may carry an older .git than its files)."""
    # a copy without .git (e.g. the tree sent to a GPU machine) is told its commit by the caller
    if os.environ.get("DEAMOE_GIT_SHA"):
        return os.environ["DEAMOE_GIT_SHA"][:12]
    try:
        sha = _git(where, "rev-parse", "--short=12", "HEAD")
        # a copy without .git inside another repository (a home folder kept in git) is not that
        # repository's commit: its files are untracked there
        if sha and not _git(where, "ls-files", "--", "."):
            return "unknown"
        if sha and _git(where, "status", "--porcelain", "--untracked-files=no"):
            sha += UNCOMMITTED
        return sha or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=256)
def row_sha(sha, where: Path = Path(__file__).resolve().parent):
    """`sha` in the 12-digit form rows record, where the checkout at `where` knows that commit: a
    GPU call's tree has no .git and records DEAMOE_GIT_SHA as given (7 digits or more), so the
    tables its runs are joined into here mixed both forms.  Anything else (an unknown commit,
    'unknown', a sha with UNCOMMITTED after it, a missing value) is returned as it is."""
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{7,40}", sha):
        return sha
    try:
        full = _git(where, "rev-parse", "--verify", "--quiet", "--short=12", f"{sha}^{{commit}}")
    except (OSError, subprocess.SubprocessError):
        full = ""
    return full if full.startswith(sha[:12]) else sha


def recorded(doc, keys) -> dict:
    """The fields `keys` of a result file's provenance (a run's summary, an evaluation's block),
    its git_sha in the form rows record (row_sha); a field it lacks is None."""
    row = {k: doc.get(k) for k in keys}
    return {**row, "git_sha": row_sha(row["git_sha"])} if "git_sha" in row else row


def _git(where: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)
    return out.stdout.strip() if out.returncode == 0 else ""


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
