"""What the project wrote, as deamoe.io decides it: the marker file `.deamoe-output` in each folder
an output lies in (naming the files written there, or saying the folder was written as a whole),
the staging folders' mark, the committed measurements' folder (reports/measured/) and the lock
files of `deamoe.io.folder_lock`.  deamoe.io's writes record here what they write; its checks
ask here what may be replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path

from deamoe.errors import DeaMoEError

OUTPUT_MARKER = ".deamoe-output"
WHOLE_FOLDER = "written by python -m deamoe; rewritten as a whole"
FILES_BELOW = "written by python -m deamoe: the files named below"
MANIFEST = "holding these files:"  # the second line of a WHOLE_FOLDER marker, then one path a line
STAGING_MARK = ".deamoe-staging"  # in every staging folder, locked by its writer while it lives
STAGING_SUFFIX = 8  # the characters tempfile.mkdtemp adds to a staging folder's prefix
COMMITTED = ("reports", "measured")  # a folder of committed measurements


class OutputPathError(DeaMoEError):
    """An output path that the command will not overwrite (it holds something it did not write)."""


def make_parent(parent: Path) -> list[Path]:
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


def file_in_the_way(path: str | os.PathLike) -> Path | None:
    """The folder above `path` that is a file (so `path`'s folder cannot be made), or None."""
    return next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)


def misleading(path: str | os.PathLike) -> str | None:
    """Why output `path` would not be written where it reads, or None: a part '-' (stdout to other
    tools: deamoe writes files, and `--out -` made a file named '-'), or '..' after a folder that
    does not exist (the checks find nothing there; once that folder is made the path leads to the
    one above it, e.g. `sub/..` to the working directory), or a part '.git' (a repository's own
    records: outputs and a marker written there sit among git's files, where nothing reads them)."""
    parts = Path(path).parts
    if "-" in parts:
        return "goes through '-', which deamoe does not take for stdout (its commands write files)"
    if ".git" in parts:
        return "goes through .git, a git repository's own records, not a place for outputs"
    missing = next((Path(*parts[:i]) for i, part in enumerate(parts) if part == ".." and i
                    and not Path(*parts[:i]).is_dir()), None)
    if missing is not None:
        return f"has '..' after {missing}, which does not exist (the path would lead elsewhere once it is made)"
    return None


def whole_folder_above(path: str | os.PathLike) -> Path | None:
    """The folder above `path` that a command wrote as a whole (a checkpoint, a tokenizer, a
    model's serving results), or None: a file written into one would change that output, which
    its command replaces (and the workflow checks) as a unit."""
    return next((p for p in Path(os.path.normpath(path)).parents if written_whole(p)), None)


def remove_created(created: list[Path]) -> None:
    """Remove folders this write created, if still empty but for a marker of this write's names
    (none moved in: a failed command leaves no trace)."""
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            if [p.name for p in folder.iterdir()] == [OUTPUT_MARKER] and (folder / OUTPUT_MARKER).is_file():
                (folder / OUTPUT_MARKER).unlink()
            folder.rmdir()


def _read_marker(folder: Path) -> tuple[list[str], str | None]:
    """`folder`'s marker as lines, and why it is no record deamoe can read or add to (None: absent,
    or a file of UTF-8 text): a link (an added name would be written where it points, into a
    user's file or another folder's record), a folder, or bytes that are no text -- no lines then."""
    marker = folder / OUTPUT_MARKER
    if marker.is_symlink():
        return [], "is a link"
    if not marker.exists():
        return [], None
    if not marker.is_file():
        return [], "is not a regular file"
    try:
        return marker.read_bytes().decode("utf-8").splitlines(), None
    except UnicodeDecodeError:
        return [], "is not UTF-8 text"
    except OSError as exc:
        return [], f"cannot be read ({exc.strerror})"


def _marker_lines(folder: Path) -> list[str]:
    return _read_marker(folder)[0]


def marker_problem(folder: Path) -> str | None:
    return _read_marker(folder)[1]


def check_marker(folder: Path) -> None:
    """An OutputPathError naming `folder`'s marker when it is no record deamoe can add to."""
    if why := marker_problem(folder):
        raise OutputPathError(f"{folder / OUTPUT_MARKER} {why}: not deamoe's record of the files it wrote "
                              "there; remove it yourself or give another folder")


def written_whole(folder: Path) -> bool:
    lines = _marker_lines(folder)
    return bool(lines) and lines[0] == WHOLE_FOLDER


# Not project files: what Snakemake, the locks and the markers add to a folder
_BOOKKEEPING = (OUTPUT_MARKER, ".deamoe.lock", ".snakemake_timestamp")


def staging_prefix(path: Path) -> str:
    """A file output's staging folder's name (deamoe.io) before mkdtemp's characters: `.NAME.`."""
    return f".{path.name}."


def too_long_to_stage(path: Path) -> str | None:
    """Why file output `path` cannot be staged beside itself, or None: its staging folder
    `.NAME.xxxxxxxx` is longer than its name, and found too long only when the finished work was
    written, it read as 'cannot write here' naming the folder."""
    folder = next((p for p in path.parents if p.is_dir()), Path.cwd())
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(staging_prefix(path))) + STAGING_SUFFIX > limit:
        return (f"is too long: its staging folder (.NAME. and {STAGING_SUFFIX} characters) would pass the "
                f"file system's {limit}-byte limit on a name")
    return None


def unrecordable(path: str | os.PathLike) -> str | None:
    """Why file output `path` cannot be named in its folder's marker, or None: a marker names one
    file a line (a name holding a line break would name other files: `t\\n.csv` names a user's
    `t`), and the bookkeeping files are no outputs (one written over the marker would drop it)."""
    name = Path(path).name
    if name in (*_BOOKKEEPING, STAGING_MARK):
        return "is the name of a file deamoe keeps its own records in"
    if name and name.splitlines() != [name]:  # ("": the path is a folder, refused below)
        return "holds a line break"
    return None


def _files_below(folder: Path) -> list[str]:
    """Every file (or link) below `folder` but its bookkeeping, as sorted POSIX paths relative to it."""
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        rel = Path(top).relative_to(folder)
        found += [(rel / f).as_posix() for f in files if not (top == str(folder) and f in _BOOKKEEPING)]
        found += [(rel / d).as_posix() for d in os.listdir(top)
                  if os.path.islink(os.path.join(top, d)) and os.path.isdir(os.path.join(top, d))]
    return sorted(found)


def mark_whole(folder: Path) -> None:
    """Mark `folder` as written as a whole, listing the files it holds now (below the line
    MANIFEST): a file added to it later is no part of it (foreign_entries)."""
    (folder / OUTPUT_MARKER).write_text("\n".join([WHOLE_FOLDER, MANIFEST, *_files_below(folder)]) + "\n",
                                        encoding="utf-8")


def _manifest(folder: Path) -> set[str] | None:
    """The files a folder written as a whole held when written; None for a marker written
    before the list was kept (all it holds counts as the project's)."""
    lines = _marker_lines(folder)
    return set(lines[2:]) if len(lines) > 1 and lines[1] == MANIFEST else None


def missing_entries(folder: str | os.PathLike) -> list[str]:
    """The files a folder written as a whole was written with that it no longer holds (removed
    since: a damaged output, which Snakemake, going by its date, takes for whole); [] where none
    is missing or its marker keeps no list."""
    folder = Path(folder)
    listed = _manifest(folder) if written_whole(folder) else None
    return sorted(listed - set(_files_below(folder))) if listed else []


def is_ours(path: str | os.PathLike) -> bool:
    """Whether the project wrote `path`: a file its folder's marker names (or inside a folder
    written as a whole), or a folder written as a whole."""
    path = Path(path)
    if path.is_symlink():
        return False
    if path.is_dir():
        return written_whole(path)
    lines = _marker_lines(path.parent)
    if lines[:1] == [WHOLE_FOLDER]:
        listed = _manifest(path.parent)
        return listed is None or path.name in listed
    return bool(lines) and lines[0] == FILES_BELOW and path.name in lines[1:]


def name_in_marker(path: Path) -> None:
    """Name `path` in its folder's marker (created on first use; appends are serialised)."""
    if in_staging(path) or (written_whole(path.parent) and _manifest(path.parent) is None):
        return  # a private scratch folder, or a folder that is ours as a whole (all it holds)
    check_marker(path.parent)
    marker = path.parent / OUTPUT_MARKER
    new = not marker.exists()
    try:
        with open(marker, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            lines = fh.read().splitlines()
            if not lines:
                fh.write(FILES_BELOW + "\n")
            if path.name not in lines[1:]:  # (in a folder written as a whole: added to its list)
                fh.write(path.name + "\n")
    except OSError:  # a full disk: no empty marker left of one this call made
        if new and marker.is_file() and marker.stat().st_size == 0:
            marker.unlink()
        raise


def foreign_entries(folder: str | os.PathLike) -> list[Path]:
    """What inside directory output `folder` the project did not write (Snakemake deletes such an
    output as a whole before its job runs again): in a folder written as a whole, every file below
    it that its marker's list lacks (added since; none for a marker without a list), else every
    file its folder's marker does not name, below too (markers, locks, Snakemake's timestamp and
    staging folders are the project's)."""
    folder = Path(folder)
    if written_whole(folder):
        listed = _manifest(folder)
        return [] if listed is None else [folder / f for f in _files_below(folder) if f not in listed]
    if (folder / STAGING_MARK).is_file():
        return []
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name in _BOOKKEEPING:
            continue
        if entry.is_dir() and not entry.is_symlink():
            found += foreign_entries(entry)
        elif not is_ours(entry):
            found.append(entry)
    return found


def record_output(path: str | os.PathLike) -> None:
    """Name file `path` in its folder's marker (the folder made if need be) before a writer outside
    this package writes it: the workflow's logs and benchmark files, which Snakemake writes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    name_in_marker(path)


def forget_output(path: str | os.PathLike) -> None:
    """Drop file `path`, deleted since, from its folder's marker: a file a user puts there later is
    not the project's (a marker left naming it would let a run replace it without a word)."""
    path = Path(path)
    marker = path.parent / OUTPUT_MARKER
    if os.path.lexists(path) or not marker.is_file():
        return
    with open(marker, "r+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        lines = fh.read().splitlines()
        start = 2 if lines[1:2] == [MANIFEST] else 1
        if path.name in lines[start:]:
            kept = lines[:start] + [x for x in lines[start:] if x != path.name]
            fh.seek(0)
            fh.truncate()
            fh.write("\n".join(kept) + "\n")


def in_staging(path: Path) -> bool:
    return any((folder / STAGING_MARK).is_file() for folder in path.parents)


def is_committed(path: str | os.PathLike) -> bool:
    """Whether `path` lies under reports/measured/ (committed measurements)."""
    parts = Path(os.path.abspath(path)).parts
    return any(parts[i:i + 2] == COMMITTED for i in range(len(parts) - 1))


LOCK_TEXT = re.compile(r"\d*\n?")  # what a lock file holds: its holder's PID


def is_lock_file(path: Path) -> bool:
    """Whether `path` is a lock file of `folder_lock` (a plain file holding at most a PID)."""
    return (path.is_file() and not path.is_symlink() and path.stat().st_size <= 32
            and bool(LOCK_TEXT.fullmatch(path.read_bytes().decode(errors="replace"))))
