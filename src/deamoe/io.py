"""Atomic writes that never remove what the project did not write; text reads that name the fault.

Every stage writes through these helpers (write to a temporary sibling, then rename), so a killed
job leaves either the old output or the new one, never a half-written one, and a failed command
leaves no staging folder (`.NAME.xxxx`) behind.

What may be replaced:
- a file output (`atomic_path`, `write_text`, ...) replaces an existing *file* atomically; an
  existing directory at that path is an error naming it (it is never removed);
- a directory output (`atomic_dir`) replaces an existing directory only when that directory is
  recognisably the project's own output: it holds the marker file `.deamoe-output`, which
  `atomic_dir` writes into every directory it creates (an empty directory is taken over too).  A
  directory without the marker, the working directory or any folder above it, and a folder holding
  `.git` are never replaced: the command stops with an error naming the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from deamoe.errors import DataError, DeaMoEError

OUTPUT_MARKER = ".deamoe-output"


class OutputPathError(DeaMoEError):
    """An output path that the command will not overwrite (it holds something it did not write)."""


def _make_parent(parent: Path) -> list[Path]:
    """mkdir -p `parent`; returns the folders it created (deepest last)."""
    created = []
    for folder in reversed([parent, *parent.parents]):
        if not folder.exists():
            created.append(folder)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputPathError(f"{parent}: cannot create the output folder (a file is in the way)") from None
    except OSError as exc:
        raise OutputPathError(f"{parent}: cannot create the output folder ({exc.strerror})") from None
    return created


def _remove_created(created: list[Path]) -> None:
    """Remove folders this write created, if still empty (a failed command leaves no trace)."""
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def _staged(path: Path) -> Iterator[tuple[Path, list[Path]]]:
    """A private staging folder `.NAME.xxxx` beside `path`, removed whatever happens."""
    created = _make_parent(path.parent)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as exc:
        _remove_created(created)
        raise OutputPathError(f"{path.parent}: cannot write here ({exc.strerror})") from None
    ok = False
    try:
        yield stage, created
        ok = True
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # made by mkdtemp above: ours alone
        if not ok:
            _remove_created(created)


@contextlib.contextmanager
def staging_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A private scratch folder `.NAME.xxxx` beside `path`, removed when the block ends."""
    with _staged(Path(path)) as (stage, _):
        yield stage


def check_output_file(path: str | os.PathLike) -> None:
    """Fail before any work when a file output's path is a directory (it is never removed)."""
    if Path(path).is_dir():
        raise OutputPathError(f"{path} is a directory; give a file path for this output")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path next to `path`; on success rename it onto `path`.

    An existing file is replaced atomically; an existing directory is an error (never removed).
    """
    path = Path(path)
    check_output_file(path)
    with _staged(path) as (stage, _):
        tmp = stage / path.name
        yield tmp
        check_output_file(path)  # a directory may have appeared while we were writing
        os.replace(tmp, path)


def check_replaceable_dir(path: str | os.PathLike) -> None:
    """Raise OutputPathError unless `path` is absent, empty, or a directory this project wrote."""
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if path.is_symlink() or not path.is_dir():
        raise OutputPathError(f"{path} exists and is not a directory; give a new folder for this output")
    real, cwd = path.resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise OutputPathError(f"{path} is the working directory or holds it; give a new folder for this output")
    if (path / ".git").exists():
        raise OutputPathError(f"{path} holds a .git repository; give a new folder for this output")
    if any(path.iterdir()) and not (path / OUTPUT_MARKER).is_file():
        raise OutputPathError(
            f"{path} exists and was not written by deamoe (no {OUTPUT_MARKER} marker); "
            "give a new folder or remove it yourself"
        )


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to `path`; on success swap it in as `path`.

    The new directory carries the `.deamoe-output` marker.  An existing directory at `path` is
    replaced only if `check_replaceable_dir` allows it (checked before and after the work), and the
    old one is moved aside into the staging folder before it is removed, so no other path is
    touched.
    """
    path = Path(path)
    check_replaceable_dir(path)
    with _staged(path) as (stage, _):
        tmp = stage / path.name
        tmp.mkdir()
        yield tmp
        (tmp / OUTPUT_MARKER).write_text("written by python -m deamoe; rewritten as a whole\n")
        check_replaceable_dir(path)
        if path.exists():
            os.replace(path, stage / ".old")  # removed with the staging folder
        os.replace(tmp, path)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, name: str = ".lock", what: str = "another process") -> Iterator[Path]:
    """Hold an exclusive lock on `folder` for the block: flock on FOLDER/NAME, which holds our PID.

    A second holder fails at once with an error naming the first one's PID.  The kernel drops a
    flock when its process ends, however it ends (kill -9 included), so no stale lock is left.
    The lock file is removed when the block ends (and the folder too, if this call created it and
    the block failed leaving it empty), so a finished or failed command leaves nothing behind.
    """
    folder = Path(folder)
    created = _make_parent(folder)
    lock = folder / name
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DeaMoEError(
                f"{folder} is in use by {what} (PID {holder}, lock {lock}); wait for it to end "
                f"or stop it (kill {holder}) first"
            ) from None
        # the holder before us may have removed the file between our open and our flock
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                break
        os.close(fd)
    ok = False
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield lock
        ok = True
    finally:
        lock.unlink(missing_ok=True)  # still holding it: nobody else can be using this file
        os.close(fd)
        if not ok:
            _remove_created(created)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV atomically (no index column)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def gunzip(raw: bytes, path: str | os.PathLike) -> bytes:
    """The content of gzip file `path` (bytes `raw`, one or more members); DataError naming the
    file and the byte where it goes wrong: not gzip, corrupt, or truncated."""
    import zlib

    if raw[:2] != b"\x1f\x8b":
        raise DataError(f"{path}: not a gzip file (its name ends in .gz but byte 0 does not start a "
                        "gzip stream)")
    out, pos, chunk = [], 0, 1 << 16
    while True:
        member = zlib.decompressobj(wbits=31)
        while not member.eof:
            if pos >= len(raw):
                raise DataError(f"{path}: truncated gzip file (the stream ends early, at byte {len(raw)})")
            piece = raw[pos:pos + chunk]
            try:
                out.append(member.decompress(piece))
            except zlib.error as exc:
                raise DataError(f"{path}: corrupt gzip data in bytes {pos}-{pos + len(piece)} ({exc})") from None
            pos += len(piece) - len(member.unused_data)
        rest = raw[pos:]
        if not rest.strip(b"\x00"):
            return b"".join(out)
        if rest[:2] != b"\x1f\x8b":
            raise DataError(f"{path}: corrupt gzip data (not gzip after the stream's end, at byte {pos})")


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file, gunzipped when its name ends in `.gz`; a malformed file is a DataError
    naming it and where: not gzip, a truncated or corrupt gzip stream, or a byte that is not UTF-8
    (with its line and byte offset)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror})") from None
    gz = path.suffix == ".gz"
    if gz:
        raw = gunzip(raw, path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        where = "of the uncompressed text" if gz else "of the file"
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {raw[exc.start:exc.start + 1]!r} at "
                        f"offset {exc.start} {where})") from None
