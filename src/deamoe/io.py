"""Atomic writes that never touch what the project did not write (reads: deamoe.readers; what
the project wrote: deamoe.ownership).

Every stage writes through these helpers (a temporary sibling, then a rename): a killed job leaves
the old output or the new one, never half of one, and no staging folder (`.NAME.xxxx`); one
killed outright (kill -9) leaves it for the next write of the output to remove (a live writer
holds a lock in it, so a folder in use is never removed).

What may be replaced:
- a file output (`atomic_path`, `write_text`, ...) replaces an existing file only when the project
  wrote it: its folder's marker file `.deamoe-output` names it (every write adds the name).  An
  existing file it does not name, a directory or a link at that path is an error naming it;
- a directory output (`atomic_dir`) replaces an existing directory only when that directory is
  recognisably the project's own output: its `.deamoe-output` says it was written as a whole
  and lists the files it was written with, which `atomic_dir` writes into every directory it
  creates (an empty directory is taken over too).  A directory without that marker, one holding
  a file the list lacks (put there since), the working directory or any folder above it, and a
  folder holding `.git` are never replaced: the command stops with an error naming the path;
- nothing under `reports/measured/` (the committed GPU measurements) is written, unless the
  command that owns a committed table replaces it (`replace_committed`, after validating it);
- a folder a command writes files into is never a folder of the user's files, the working
  directory or above (`check_output_folder`); no output is or holds an input (`check_apart`).

Commands call `check_outputs` before any work (a refused path is named before an hour of
training, not after) and hold `folder_lock` on the folder they write (one writer at a time).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from deamoe.errors import FULL_DISK, DeaMoEError, disk_full
from deamoe.locks import folder_lock, output_lock  # noqa: F401 (the commands take them from here)
from deamoe.ownership import (OUTPUT_MARKER, STAGING_MARK, OutputPathError, check_marker,
                              file_in_the_way, foreign_entries, in_staging, is_committed, is_lock_file,
                              is_ours, make_parent, mark_whole, misleading, name_in_marker, remove_created,
                              staging_prefix, too_long_to_stage, unrecordable, whole_folder_above,
                              written_whole)


def _no_file_in_the_way(path: Path) -> None:
    """An OutputPathError when a folder above `path` is a file (its folder could not be made), the
    nearest existing one cannot be written (else found only when the finished work is renamed
    into place), or another output, written as a whole (a checkpoint: writing into it would
    change that output); before these, a path that would not be written where it reads."""
    if why := misleading(path):
        raise OutputPathError(f"{path}: an output path that {why}; give a file or folder name")
    blocker = file_in_the_way(path)
    if blocker is not None:
        raise OutputPathError(f"{blocker}: cannot create the output folder (a file is in the way)")
    check_writable(next((p for p in Path(path).parents if p.exists()), Path.cwd()))
    whole = whole_folder_above(path)
    if whole is not None:
        raise OutputPathError(f"{path} lies inside {whole}, an output that a deamoe command wrote as a "
                              "whole (a checkpoint, tokenizer or serving results); give a path outside it")


def check_writable(folder: Path) -> None:
    """An OutputPathError naming existing `folder` when this process cannot make files in it."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{folder}: cannot write here (no write permission, or a read-only file system)")


def check_output_file(path: str | os.PathLike, replace_committed: bool = False) -> None:
    """Fail before any work unless file output `path` is absent or the project wrote it.

    A directory, a link (even under `replace_committed`) or a file the project did not write is
    never replaced; nor is anything under reports/measured/ unless `replace_committed` (the
    command owning that table); nor is a path whose folder cannot be made (a file in the way:
    named now, not after the work).
    """
    path = Path(path)
    if why := unrecordable(path) or too_long_to_stage(path):  # (the name as Python writes it: one line)
        raise OutputPathError(f"{str(path)!r}: an output file name that {why}; give another name")
    check_marker(path.parent)  # found now, not when the finished output is recorded
    _no_file_in_the_way(path)
    if path.is_dir() and not path.is_symlink():
        raise OutputPathError(f"{path} is a directory; give a file path for this output")
    if path.is_symlink():  # replacing it would drop the link, never write where it points
        raise OutputPathError(f"{path} is a link; give the file itself (not a link) for this output")
    if is_committed(path) and not replace_committed:
        raise OutputPathError(f"{path} is under reports/measured/ (committed measurements, written "
                              "only by the command that owns each table); give another path")
    if (path.exists() or path.is_symlink()) and not replace_committed and not is_ours(path):
        raise OutputPathError(
            f"{path} exists and was not written by deamoe (not named in "
            f"{path.parent / OUTPUT_MARKER}); give another path or remove it yourself")


def _existing_folder(path: Path) -> bool:
    """Whether output folder `path` exists; an OutputPathError if it is a link, no directory, the
    working directory or above it, or holds .git."""
    _no_file_in_the_way(path)
    if not (path.exists() or path.is_symlink()):
        return False
    if path.is_symlink():
        raise OutputPathError(f"{path} is a link; give a new folder (not a link) for this output")
    if not path.is_dir():
        raise OutputPathError(f"{path} exists and is not a directory; give a new folder for this output")
    check_writable(path)
    real, cwd = path.resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise OutputPathError(f"{path} is the working directory or holds it; give a new folder for this output")
    if (path / ".git").exists():
        raise OutputPathError(f"{path} holds a .git repository; give a new folder for this output")
    return True


def check_output_folder(path: str | os.PathLike) -> None:
    """Fail before any work unless folder `path`, that a command writes files into, is absent or
    fit (`_existing_folder`) and holds no file but lock files unless deamoe wrote into it before
    (its marker) or it is committed measurements: a folder of the user's files is no output."""
    path = Path(path)
    if _existing_folder(path) and written_whole(path):
        raise OutputPathError(f"{path} is an output that a deamoe command wrote as a whole (a checkpoint, "
                              "tokenizer or serving results), not a folder to write files into; give a new folder")
    check_marker(path)
    if not path.exists() or (path / OUTPUT_MARKER).is_file() or is_committed(path):
        return
    foreign = next((e for e in sorted(path.iterdir()) if not (e.is_dir() or is_lock_file(e))), None)
    if foreign is not None:
        raise OutputPathError(f"{path} holds files deamoe did not write (e.g. {foreign}; no "
                              f"{OUTPUT_MARKER} marker); give a new folder for this output")


def check_apart(outputs, inputs=()) -> None:
    """Fail before any work when an output is, or lies inside, another output or an input.
    outputs, inputs: (what, path) pairs, `what` naming the option in the message."""
    others = [(w, p, "another output") for w, p in outputs] + [(w, p, "an input") for w, p in inputs]
    for i, (what, path) in enumerate(outputs):
        real = Path(os.path.realpath(path))
        for j, (other, other_path, kind) in enumerate(others):
            theirs = Path(os.path.realpath(other_path))
            how = "is" if real == theirs else "lies inside" if theirs in real.parents else None
            if how and i != j:
                raise OutputPathError(f"{what} {path} {how} {other} {other_path}, {kind} of this "
                                      "command; give it another path")


def check_replaceable_dir(path: str | os.PathLike) -> None:
    """Raise OutputPathError unless `path` is absent, empty, or a directory this project wrote."""
    path = Path(path)
    if not _existing_folder(path):
        return
    if is_committed(path):
        raise OutputPathError(f"{path} is under reports/measured/ (committed measurements); give another folder")
    if any(path.iterdir()) and not written_whole(path):
        raise OutputPathError(
            f"{path} exists and was not written by deamoe (no {OUTPUT_MARKER} marker); "
            "give a new folder or remove it yourself"
        )
    foreign = foreign_entries(path)
    if foreign:
        raise OutputPathError(f"{path} holds {foreign[0]}, which deamoe did not write (added since); "
                              "move it away or remove it yourself")


def nested_folders(files, folder) -> list[Path]:
    """The folders below `folder` (itself excluded) that the file outputs `files` lie in, outermost
    first: e.g. OUT/state for OUT/state/resume.pt."""
    folder, found = Path(folder), {}
    for f in map(Path, files):
        if folder in f.parents:
            for sub in reversed(f.relative_to(folder).parents[:-1]):
                found[folder / sub] = None
    return list(found)


def check_outputs(files=(), dirs=(), replace_committed: bool = False, folders=()) -> None:
    """Before any work: every file output absent or the project's (`check_output_file`), every
    directory output absent, empty or the project's (`check_replaceable_dir`), every folder
    (`check_output_folder`), and so every folder below one of them that a file output lies in
    (a folder of the user's files at OUT/state or OUT/tables is no output either); the staging
    folders a killed earlier write of each left are removed."""
    for f in files:
        check_output_file(f, replace_committed=replace_committed)
    for d in dirs:
        check_replaceable_dir(d)
    for folder in folders:
        for each in (folder, *nested_folders(files, folder)):
            check_output_folder(each)
    for path in (*files, *dirs):
        clear_stale_staging(path)


# --- staging --------------------------------------------------------------------------------

def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock of `path`, or None when another process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def clear_stale_staging(path: str | os.PathLike) -> None:
    """Remove the staging folders (`.NAME.xxxx`) of output `path` whose writer has ended.

    Only folders holding our staging mark qualify, and only when its lock is free: a writer holds
    it while it lives, and the kernel drops it when the writer ends, kill -9 included.
    """
    path = Path(path)
    pattern = re.compile(re.escape(staging_prefix(path)) + r"[^.]+")
    with contextlib.suppress(OSError):
        for entry in path.parent.iterdir():
            mark = entry / STAGING_MARK
            if not (pattern.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink()
                    and mark.is_file()):
                continue
            fd = _try_lock(mark)
            if fd is not None:
                shutil.rmtree(entry, ignore_errors=True)
                os.close(fd)


@contextlib.contextmanager
def _staged(path: Path) -> Iterator[Path]:
    """A private staging folder `.NAME.xxxx` beside `path`, removed whatever happens."""
    created = make_parent(path.parent)
    clear_stale_staging(path)
    stage = fd = None
    ok = False
    try:
        # Ctrl-C / SIGTERM wait while the folder and its mark are made, and while they are
        # removed: a stop in either would leave a folder no later run takes for a dead writer's
        with stops_deferred():
            try:
                stage = Path(tempfile.mkdtemp(prefix=staging_prefix(path), dir=path.parent))
                # The mark appears already locked (created under another name, then renamed), so
                # another process's clear_stale_staging never takes a live folder for a dead one.
                fd = os.open(stage / ".mark", os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.replace(stage / ".mark", stage / STAGING_MARK)
            except OSError as exc:
                raise OutputPathError(f"{path.parent}: cannot write here ({exc.strerror})") from None
        try:
            yield stage
        except Exception as exc:  # noqa: BLE001 - a write that filled the output's file system,
            # named by the output the user gave (a file of a staging folder: by that folder's; an
            # OSError naming its own file is reported with that name)
            if (isinstance(exc, DeaMoEError) or not disk_full(exc) or getattr(exc, "filename", None) is not None
                    or in_staging(path)):
                raise
            why = getattr(exc, "strerror", None) or FULL_DISK[0]
            raise OutputPathError(f"{path}: {why} while it was written (nothing of it kept); "
                                  "free some space or give a path on another file system") from None
        ok = True
    finally:
        def clean():  # run twice at most: a second time removes nothing
            nonlocal stage, fd
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)  # made by mkdtemp above: ours alone
                stage = None
            if fd is not None:
                os.close(fd)
                fd = None
            if not ok:
                remove_created(created)

        try:
            with stops_deferred():
                clean()
        finally:  # a stop that came before its handlers held it back: the folder still goes
            clean()


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back for the block and delivered when it ends; meanwhile the main
    thread's handlers only note a stop (blocking the signals would not do: the kernel may hand
    Ctrl-C to another thread, numpy's BLAS pool, and Python raises it all the same)."""
    main = threading.current_thread() is threading.main_thread()
    caught, handlers = [], {}
    try:
        # one at a time inside the try: a stop between the two leaves neither handler changed
        for n in (signal.SIGINT, signal.SIGTERM) if main else ():
            handlers[n] = signal.signal(n, lambda got, _: caught.append(got))
        yield
    finally:
        for n, handler in handlers.items():  # None: a handler set outside Python
            signal.signal(n, signal.SIG_DFL if handler is None else handler)
        if caught:  # now, to the command's own handler (KeyboardInterrupt, Terminated)
            signal.raise_signal(caught[0])


@contextlib.contextmanager
def staging_dir(path: str | os.PathLike, publish: bool = False) -> Iterator[Path]:
    """A private scratch folder `.NAME.xxxx` beside `path`, removed when the block ends.
    publish: its files then replace their namesakes under folder `path` all at once (a stop
    waits), never a mix; other files there stay."""
    path = Path(path)
    with _staged(path) as stage:
        yield stage
        moves = {p: path / p.relative_to(stage) for p in sorted(stage.rglob("*"))
                 if publish and p.is_file() and p.name != STAGING_MARK}
        for folder in nested_folders(moves.values(), path):  # every one checked before the first is moved
            check_output_folder(folder)
        for target in moves.values():
            check_output_file(target)
        with stops_deferred():
            for src, target in moves.items():
                make_parent(target.parent)
                name_in_marker(target)
                os.replace(src, target)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, replace_committed: bool = False) -> Iterator[Path]:
    """Yield a temporary file path next to `path`; on success rename it onto `path`.

    Only a file the project wrote is replaced (`check_output_file`, before and after the work).
    """
    path = Path(path)
    check_output_file(path, replace_committed)
    with _staged(path) as stage:
        tmp = stage / path.name
        last = _last_writes(lambda: (check_output_file(path, replace_committed),  # (appeared meanwhile?)
                                     # before the rename: a named file that is absent harms nobody
                                     replace_committed or name_in_marker(path)))
        yield tmp
        last()
        os.replace(tmp, path)


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
    with _staged(path) as stage:
        tmp = stage / path.name
        tmp.mkdir()
        last = _last_writes(lambda: (mark_whole(tmp), check_replaceable_dir(path)))
        yield tmp
        last()
        if path.exists():
            os.replace(path, stage / ".old")  # removed with the staging folder
        os.replace(tmp, path)


class _Outputs(contextlib.ExitStack):
    """atomic_outputs' stack: the outputs entered on it leave it their last writes (_last_writes)."""

    def __init__(self):
        super().__init__()
        self.last_writes: list = []

    def enter_context(self, cm):
        token = _OUTPUTS.set(self)
        try:
            return super().enter_context(cm)
        finally:
            _OUTPUTS.reset(token)


_OUTPUTS: contextvars.ContextVar[_Outputs | None] = contextvars.ContextVar("_OUTPUTS", default=None)


def _last_writes(write):
    """`write` (what an output writes before it is moved in: its marker), as a function that runs
    it once: atomic_outputs runs those of all its outputs before the first is moved in, else the
    output runs its own."""
    done = []

    def run():
        if not done:
            done.append(write())

    if (outputs := _OUTPUTS.get()) is not None:
        outputs.last_writes.append(run)
    return run


@contextlib.contextmanager
def atomic_outputs() -> Iterator[contextlib.ExitStack]:
    """An ExitStack to enter several `atomic_path` / `atomic_dir` outputs on, published together:
    when the block succeeds each one's last writes (markers) are made, then they are renamed into
    place (last entered first) while Ctrl-C and SIGTERM wait, so a stopped command, or one whose
    disk filled as the markers were written, leaves every old output or every new one, never a mix."""
    with _Outputs() as stack:
        yield stack
        for write in stack.last_writes:
            write()
        with stops_deferred():
            stack.close()


# --- writing and reading ----------------------------------------------------------------------

def write_text(path: str | os.PathLike, text: str, replace_committed: bool = False) -> None:
    with atomic_path(path, replace_committed) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: str | os.PathLike, frame, replace_committed: bool = False) -> None:
    """Write a pandas DataFrame as CSV atomically (no index column)."""
    write_csvs({path: frame}, committed=(path,) if replace_committed else ())


def write_csvs(frames: dict, committed=()) -> None:
    """Write several DataFrames ({path: frame}) as CSV, published together (`atomic_outputs`): a
    failed or stopped write leaves every old table or every new one, never a mix.  committed:
    the paths whose committed table may be replaced (atomic_path's replace_committed)."""
    with atomic_outputs() as outputs:
        for path, frame in frames.items():
            frame.to_csv(outputs.enter_context(atomic_path(path, path in committed)), index=False)
