"""deamoe.resolved: the resolved config the Snakefile writes when a run starts is written whole or
not at all, and a write that fails is one line naming the file."""

from __future__ import annotations

import errno
import os

from deamoe.resolved import write_resolved


class _FullDisk:
    """A file object whose write fails as on a full disk."""

    def __init__(self, fd, *_, **__):
        self.fd = fd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_written_whole_and_replaced(tmp_path):
    path = tmp_path / "results" / "config" / "resolved-0123.yaml"
    assert write_resolved(path, "a: 1\n") is None and path.read_text() == "a: 1\n"
    assert write_resolved(path, "a: 2\n") is None and path.read_text() == "a: 2\n"
    assert os.listdir(path.parent) == [path.name]


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """Snakemake printed the OSError with the Snakefile's stack, and the temporary file stayed."""
    path = tmp_path / "resolved-0123.yaml"
    path.write_text("a: 1\n")
    monkeypatch.setattr("deamoe.resolved.os.fdopen", _FullDisk)
    problem = write_resolved(path, "a: 2\n")
    assert problem == (f"{path}: No space left on device while it was written (nothing of it kept); free "
                       "some space (the resolved config every job reads)")
    assert os.listdir(tmp_path) == [path.name] and path.read_text() == "a: 1\n"


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "results").write_text("mine\n")
    problem = write_resolved(tmp_path / "results" / "config" / "resolved-0123.yaml", "a: 1\n")
    assert problem is not None and problem.startswith(f"{tmp_path}/results/config: cannot make this folder")
    assert (tmp_path / "results").read_text() == "mine\n"
