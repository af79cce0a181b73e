"""One error type for bad input: configuration, data files, checkpoints, devices.

The CLI turns a DeaMoEError into a single line on stderr and exit status 2, so every message
must name the key, file, row or device at fault.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class DeaMoEError(Exception):
    """Bad input that a user can fix; the message is one line naming what is wrong."""


class ConfigError(DeaMoEError, ValueError):
    """A configuration field has a wrong name, type or value."""


class DataError(DeaMoEError):
    """A data file is missing, empty or malformed."""


def run_reporting(command, *args) -> int:
    """Run command(*args) for a module's `python -m` entry point: exit status 0, or 2 with a
    DeaMoEError's one line on stderr, as `python -m deamoe` answers bad input."""
    import sys

    try:
        command(*args)
    except DeaMoEError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def asked_for_help(argv: list[str], usage: str) -> bool:
    """Whether a module's `python -m` entry point was given only -h or --help, its usage then
    printed on stdout: read as an argument, it was a file 'not found' or a program run."""

    if argv in (["-h"], ["--help"]):
        print(usage)
        return True
    return False


def not_a_file(path: str | os.PathLike) -> str:
    """Why `path`, which is no regular file, cannot be read as one: a folder, a pipe or device
    (which exists: "no such file" sent the user looking for a typo), a link to nothing, or nothing."""
    path = Path(path)
    if path.is_dir():
        return "a folder, not a file"
    if path.exists():
        return "not a regular file (a device, pipe or socket)"
    if not path.is_symlink():
        return "no such file"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # its target "exists" as a link: naming it would mislead
            return "a link that leads back to itself (a loop), not a file"
    return f"a link to {os.readlink(path)}, which does not exist"


def absent(path: str | os.PathLike) -> bool:
    """Whether nothing at all is at `path`: the one case in which an input may be taken as not
    there (a stage not run, an optional file not given).  A link to nothing, a folder or a pipe
    where a file is read was put there: its reader names it (not_a_file), where `exists()` or
    `is_file()` skipped it without a word or called it missing."""
    return not os.path.lexists(path)


# How a write that filled the file system reads: an OSError's strerror, or the text of a library
# that wraps it (safetensors: "IoError(Os { code: 28, kind: StorageFull, message: ... })").
FULL_DISK = ("No space left on device", "Disk quota exceeded", "StorageFull")


def disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, is a write that filled the file system."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(mark in str(exc) for mark in FULL_DISK):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
