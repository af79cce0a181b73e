"""One writer per folder: `folder_lock` (flock on a lock file holding the holder's PID) and
`output_lock`, the lock of an output replaced as a whole (deamoe.io re-exports both)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from deamoe.errors import DeaMoEError
from deamoe.ownership import OutputPathError, is_lock_file, make_parent, remove_created


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, name: str = ".deamoe.lock", what: str = "another process",
                subject: str | os.PathLike | None = None) -> Iterator[Path]:
    """Hold an exclusive lock on `folder` for the block: flock on FOLDER/NAME, which holds our PID.

    A second holder fails at once with an error naming `subject` (default: the folder) and the
    first one's PID.  The kernel drops a flock when its process ends, however it ends (kill -9
    included), so no stale lock is left.  The lock file is removed when the block ends (and the
    folder too, if this call created it and the block failed leaving it empty), so a finished or
    failed command leaves nothing behind.  A file of that name that is no lock file (it holds
    more than a PID) is never taken over.
    """
    folder = Path(folder)
    subject = folder if subject is None else subject
    lock = folder / name
    if (lock.exists() or lock.is_symlink()) and not is_lock_file(lock):
        raise OutputPathError(f"{lock} exists and is not a deamoe lock file; remove it yourself or "
                              "give another output folder")
    created = make_parent(folder)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            remove_created(created)
            raise DeaMoEError(
                f"{subject} is in use by {what} (PID {holder}, lock {lock}); wait for it to end "
                f"or stop it (kill {holder}) first"
            ) from None
        # the holder before us may have removed the file between our open and our flock
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                break
        os.close(fd)
    ok = False
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full disk: named by the lock, not as a fault of the program
            raise OutputPathError(f"{lock}: {exc.strerror} while this lock file was written; free some space "
                                  "or give a folder on another file system") from None
        yield lock
        ok = True
    finally:
        lock.unlink(missing_ok=True)  # still holding it: nobody else can be using this file
        os.close(fd)
        if not ok:
            remove_created(created)


def output_lock(path: str | os.PathLike, what: str = "another deamoe command"):
    """The lock of an output that is replaced as a whole (`atomic_dir`): `.NAME.lock` beside it."""
    path = Path(os.path.abspath(path))
    return folder_lock(path.parent, f".{path.name}.lock", what=what, subject=path)
