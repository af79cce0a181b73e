"""The resolved config file the Snakefile writes when a run starts (workflow/rules/common.smk):
the merged, validated config, named by a hash of its content, which every job reads.

Light imports only: the Snakefile imports this module.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from deamoe.errors import disk_full


def write_resolved(path: str | os.PathLike, text: str) -> str | None:
    """Write `text` to `path` whole: a temporary file beside it, renamed when written.  None when
    written; else one line naming `path` and why (a full disk, a read-only folder), nothing of it
    left behind -- Snakemake printed the OSError with the Snakefile's stack, and the temporary file
    stayed."""
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        link = " (a link to nothing)" if path.parent.is_symlink() and not path.parent.exists() else ""
        return (f"{path.parent}{link}: cannot make this folder ({exc.strerror or exc}), which holds the "
                "resolved config every job reads; move away what is there")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # as any file written (mkstemp's 0600 hid it from the group)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
        return None
    except OSError as exc:
        hint = "free some space" if disk_full(exc) else "make its folder writable"
        return (f"{path}: {exc.strerror or exc} while it was written (nothing of it kept); {hint} "
                "(the resolved config every job reads)")
    finally:
        if tmp is not None and os.path.lexists(tmp):  # not renamed: a failed write or a stop
            with contextlib.suppress(OSError):
                os.unlink(tmp)
