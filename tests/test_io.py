"""deamoe.io: what an output path may be (the checks every command runs before any work)."""

from __future__ import annotations

import io

import pytest

from deamoe.cli import main
from deamoe.io import OutputPathError, atomic_dir, check_output_folder, check_outputs


@pytest.fixture
def whole(tmp_path, monkeypatch):
    """ck/: an output written as a whole (as a checkpoint is), the working folder its parent."""
    monkeypatch.chdir(tmp_path)
    with atomic_dir(tmp_path / "ck") as tmp:
        (tmp / "model.safetensors").write_bytes(b"weights")
    return tmp_path / "ck"


def _listing(folder):
    return sorted((p.relative_to(folder).as_posix(), p.read_bytes() if p.is_file() else None)
                  for p in folder.rglob("*"))


@pytest.mark.parametrize("out", ["ck/t.csv", "ck/sub/t.csv"])
def test_a_file_output_inside_an_output_written_as_a_whole_is_refused(whole, capsys, out):
    """It would change that output (and its list of files): a table written into a checkpoint."""
    before = _listing(whole)
    status = main(["table1", "--models", "Baseline-7B", "--out", out])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{out} lies inside ck, an output that a deamoe command wrote as a whole" in err
    assert _listing(whole) == before


def test_an_output_written_as_a_whole_is_no_folder_to_write_files_into(whole):
    """A run folder given as another run's checkpoint: its log, summary and checkpoint would go
    into that checkpoint."""
    with pytest.raises(OutputPathError, match="ck is an output that a deamoe command wrote as a whole"):
        check_output_folder("ck")
    with pytest.raises(OutputPathError, match="lies inside ck"):
        check_outputs(files=["ck/run/log.csv"], folders=["ck/run"])
    check_outputs(dirs=["ck"])  # replacing it as a whole stays allowed


@pytest.mark.parametrize("name", ["t\n.csv", "t\u2028.csv", ".deamoe-output", ".deamoe.lock"])
def test_an_output_name_its_folders_marker_cannot_record_is_refused(tmp_path, monkeypatch, capsys, name):
    """A marker names one file a line: an output `t\\n.csv` named the user's file `t` as the
    project's (the next `--out t` replaced it without a word), and an output named like the marker
    or a lock file was written over it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t").write_text("my own notes\n")
    for out, why in ((name, "an output file name that"), ("t", "t exists and was not written by deamoe")):
        status = main(["table1", "--models", "Baseline-7B", "--out", out])
        err = capsys.readouterr().err
        assert status == 2 and len(err.strip().splitlines()) == 1 and why in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"] and (tmp_path / "t").read_text() == "my own notes\n"


def _disk_full(*_, **__):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")  # as a write() raises it: no file named


def test_a_full_file_system_is_one_line_naming_the_output_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    # it was "failed unexpectedly (OSError: [Errno 28] ...); rerun with --traceback", exit status 1,
    # as for a fault of the program
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("pandas.DataFrame.to_csv", _disk_full)
    assert main(["table1", "--models", "Baseline-7B", "--out", "t/t.csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: t/t.csv: No space left on device while it was written (nothing of it kept); "
                   "free some space or give a path on another file system"), err
    assert list(tmp_path.iterdir()) == []


def _disk_full_wrapped(*_, **__):
    # safetensors' error when save_pretrained's write fills the disk: not an OSError
    raise Exception('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                    'message: "No space left on device" })')


@pytest.mark.parametrize("fails", ["wrapped", "stdout"])
def test_a_full_file_system_a_library_reports_is_one_line(tmp_path, monkeypatch, capsys, fails):
    # a checkpoint's safetensors write, or stdout on a full disk (`> /dev/full`), read "failed
    # unexpectedly ... rerun with --traceback", exit status 1, as a fault of the program
    monkeypatch.chdir(tmp_path)

    class FullStdout(io.StringIO):
        flush = write = _disk_full

    with monkeypatch.context() as patch:
        if fails == "wrapped":
            patch.setattr("pandas.DataFrame.to_csv", _disk_full_wrapped)
            argv = ["table1", "--models", "Baseline-7B", "--out", "t.csv"]
        else:
            patch.setattr("sys.stdout", FullStdout())  # budget prints its JSON
            argv = ["budget", "--h", "8", "--h-ffn", "4", "--n-expert", "8", "--k-expert", "2", "--n-dept", "2",
                    "--dea-n-expert", "4", "--k-dept", "1", "--dea-k-expert", "2"]
        assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    if fails == "wrapped":  # within the output's staged write: named as an OSError's would be
        assert err == ("error: t.csv: No space left on device while it was written (nothing of it kept); "
                       "free some space or give a path on another file system"), err
    else:
        assert err == ("error: python -m deamoe budget: the file system filled while it wrote (No space left "
                       "on device); free some space and run it again"), err
    assert list(tmp_path.iterdir()) == []


def test_a_full_file_system_inside_a_staging_folder_names_the_output_given(tmp_path):
    from deamoe.io import staging_dir, write_text

    with pytest.raises(OutputPathError, match=r"^\S*/rep: No space left on device"):
        with staging_dir(tmp_path / "rep", publish=True) as stage:
            write_text(stage / "tables" / "a.md", "done\n")
            with atomic_dir(stage / "figures"):
                _disk_full()
    assert list(tmp_path.iterdir()) == []


def test_a_stop_before_the_cleanup_holds_stops_back_still_removes_the_staging_folder(tmp_path, monkeypatch):
    # SIGTERM in the instant between the end of a write and the cleanup's holding back of stops
    # raised there and left `.NAME.xxxx/.deamoe-staging` behind (a training run's log.csv)
    import contextlib

    import deamoe.io as dio

    real, entered = dio.stops_deferred, []

    @contextlib.contextmanager
    def stop_on_cleanup():
        entered.append(1)
        if len(entered) == 2:  # the first: making the folder; the second: removing it
            raise KeyboardInterrupt
        with real():
            yield

    monkeypatch.setattr(dio, "stops_deferred", stop_on_cleanup)
    with pytest.raises(KeyboardInterrupt):
        with dio.atomic_path(tmp_path / "log.csv") as tmp:
            tmp.write_text("step\n")
    assert len(entered) == 2 and (tmp_path / "log.csv").read_text() == "step\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".log.csv")] == []
