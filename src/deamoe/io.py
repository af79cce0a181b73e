"""Atomic writes: nothing half-written is ever left at a result path.

Every stage writes through these helpers (write to a temporary sibling, then rename), so a killed
job leaves either the old file or the new one, never a truncated one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it onto `path`.

    Works for files and directories (a directory is swapped in after the old one is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)) / path.name
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV atomically (no index column)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
