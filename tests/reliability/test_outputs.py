"""Writes never remove what they did not create, and failures leave no staging folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from deamoe.errors import DeaMoEError
from deamoe.io import OUTPUT_MARKER, atomic_dir, atomic_path, folder_lock, write_text

from cli_battery import REPO, assert_one_line_error, run_cli, tree


def _foreign(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "precious.txt").write_text("mine")
    return folder


@pytest.mark.parametrize("command", [
    ["table1", "--models", "Baseline-7B", "--out"],
    ["loading", "--models", "Baseline-7B", "--tokens", "1", "--trials", "2", "--out"],
])
@pytest.mark.parametrize("target", ["dir", ".", "..", "nested/dir"])
def test_file_output_onto_a_directory_is_an_error_and_keeps_it(work, failing, command, target):
    _foreign(work / "dir")
    (work / "nested" / "dir").mkdir(parents=True)
    failing([*command, target], target.rstrip("/"), "is a directory")
    assert (work / "dir" / "precious.txt").read_text() == "mine"


def test_file_output_from_the_repository_root_cannot_touch_the_checkout(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    before = tree(REPO / "src")
    status, err = run_cli(["table1", "--models", "Baseline-7B", "--out", "."], capsys)
    assert_one_line_error(status, err, ".", "is a directory")
    assert (REPO / ".git").exists() and tree(REPO / "src") == before


def test_file_output_replaces_its_own_file_atomically_and_never_a_foreign_one(work, failing, capsys):
    for models in ("Baseline-7B", "DeepSeek-V3"):  # the second run replaces the first's table
        status, err = run_cli(["table1", "--models", models, "--out", "t.csv"], capsys)
        assert status == 0, err
    assert (work / "t.csv").read_text().splitlines()[1].startswith("DeepSeek-V3,")
    assert sorted(p.name for p in work.iterdir()) == [OUTPUT_MARKER, "t.csv"]  # no staging folder left
    (work / "mine.csv").write_text("old")
    failing(["table1", "--models", "Baseline-7B", "--out", "mine.csv"], "mine.csv", "not written by deamoe")


@pytest.mark.parametrize("setup, reason", [
    (lambda p: _foreign(p), "was not written by deamoe"),
    (lambda p: (p.mkdir(), (p / ".git").mkdir()), ".git"),
    (lambda p: p.write_text("a file"), "is not a directory"),
])
def test_directory_output_refuses_what_it_did_not_write(work, setup, reason):
    target = work / "out"
    setup(target)
    before = tree(work)
    with pytest.raises(DeaMoEError, match=reason):
        with atomic_dir(target) as tmp:
            (tmp / "new.txt").write_text("x")
    assert tree(work) == before


@pytest.mark.parametrize("target", [".", ".."])
def test_directory_output_refuses_the_working_directory_and_above(work, target):
    with pytest.raises(DeaMoEError, match="working directory"):
        with atomic_dir(target):
            pass


def test_directory_output_replaces_its_own_output_and_an_empty_folder(work):
    (work / "empty").mkdir()
    for name in ("empty", "fresh"):
        with atomic_dir(work / name) as tmp:
            (tmp / "a.txt").write_text("one")
        assert (work / name / OUTPUT_MARKER).is_file()
    with atomic_dir(work / "fresh") as tmp:  # its own output: replaced as a whole
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in (work / "fresh").iterdir()) == [OUTPUT_MARKER, "b.txt"]
    assert sorted(p.name for p in work.iterdir()) == ["empty", "fresh"]  # no staging left


@pytest.mark.parametrize("added", ["notes.txt", "sub/notes.txt"])
def test_directory_output_refuses_a_file_added_to_it_since_and_keeps_it(work, added):
    """A folder written as a whole lists what it held: a file put in it later (beside the files,
    or in a subfolder) is the user's, and the folder is not replaced with it; an old marker with no
    list keeps the old meaning (everything in it is the project's)."""
    with atomic_dir(work / "out") as tmp:
        (tmp / "a.txt").write_text("one")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.txt").write_text("two")
    (work / "out" / added).write_bytes(b"my own notes\n")
    before = tree(work)
    with pytest.raises(DeaMoEError, match=f"holds {work / 'out' / added}, which deamoe did not write"):
        with atomic_dir(work / "out") as tmp:
            (tmp / "new.txt").write_text("x")
    assert tree(work) == before
    marker = work / "out" / OUTPUT_MARKER
    marker.write_text(marker.read_text().splitlines()[0] + "\n")  # written before the list was kept
    with atomic_dir(work / "out") as tmp:
        (tmp / "new.txt").write_text("x")
    assert (work / "out" / "new.txt").is_file()


@pytest.mark.parametrize("writer", ["file", "dir"])
def test_a_failed_write_leaves_the_old_output_and_no_staging_folder(work, writer):
    target = work / "a" / "b" / "out"
    if writer == "file":
        write_text(target, "old")
    else:
        with atomic_dir(target) as tmp:
            (tmp / "x").write_text("old")
    before = tree(work)
    with pytest.raises(RuntimeError):
        with (atomic_path(target) if writer == "file" else atomic_dir(target)) as tmp:
            (tmp if writer == "dir" else tmp.parent).joinpath("partial").write_text("half")
            raise RuntimeError("killed mid-write")
    assert tree(work) == before


def test_a_failed_write_removes_the_folders_it_created(work):
    with pytest.raises(RuntimeError):
        with atomic_path(work / "new" / "deeper" / "x.csv"):
            raise RuntimeError("failed")
    assert list(work.iterdir()) == []


def test_a_second_lock_holder_is_named_and_the_lock_dies_with_its_process(work):
    import signal
    import subprocess
    import sys
    import time

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from deamoe.io import folder_lock\n"
         "with folder_lock(sys.argv[1], 'train.lock'):\n print('held', flush=True); time.sleep(60)",
         str(work / "run")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DeaMoEError, match=rf"run is in use by another trainer \(PID {holder.pid}"):
            with folder_lock(work / "run", "train.lock", what="another trainer"):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    time.sleep(0.1)
    with folder_lock(work / "run", "train.lock") as lock:  # kill -9 left no stale lock
        assert lock.read_text().strip() == str(__import__("os").getpid())


MARKERS = {
    "a link to a user's file": (lambda m: m.symlink_to(m.parent.parent / "notes.txt"), "is a link"),
    "a folder": (lambda m: m.mkdir(), "is not a regular file"),
    "bytes that are no text": (lambda m: m.write_bytes(b"\xff\xfe\x00"), "is not UTF-8 text"),
}


@pytest.mark.parametrize("command", [["table1", "--models", "Baseline-7B", "--out", "o/t.csv"],
                                     ["bench", "overread", "--draws", "1", "o"]])
@pytest.mark.parametrize("kind", list(MARKERS))
def test_a_marker_that_is_no_record_of_deamoes_is_named_before_any_work(work, failing, command, kind):
    """The name of the new output was appended through a linked marker into the file it pointed
    to (a user's notes, or another folder's record); a folder or binary bytes there failed only
    when the finished output was recorded, the latter as a fault of the program."""
    (work / "notes.txt").write_text("mine\n")
    (work / "o").mkdir()
    make, why = MARKERS[kind]
    make(work / "o" / OUTPUT_MARKER)
    failing(command, f"o/{OUTPUT_MARKER} {why}", "remove it yourself")
    assert (work / "notes.txt").read_text() == "mine\n"
