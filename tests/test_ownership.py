"""deamoe.ownership: a marker this call made is not left empty when naming a file in it fails."""

from __future__ import annotations

import builtins
import errno

import pytest

from deamoe.ownership import OUTPUT_MARKER, record_output


def test_a_full_disk_leaves_no_empty_marker(tmp_path, monkeypatch):
    """The workflow names each log in its folder's marker before any job: on a full disk the
    marker was created and left empty."""

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("deamoe.ownership.open", lambda *a, **k: Full(builtins.open(*a, **k)), raising=False)
    with pytest.raises(OSError):
        record_output(tmp_path / "logs" / "table1.log")
    assert not (tmp_path / "logs" / OUTPUT_MARKER).exists()
    monkeypatch.undo()
    record_output(tmp_path / "logs" / "table1.log")  # space again: recorded as before
    assert (tmp_path / "logs" / OUTPUT_MARKER).read_text().splitlines()[1:] == ["table1.log"]
