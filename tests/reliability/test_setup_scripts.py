"""scripts/setup.sh and scripts/test.sh refuse an interpreter the lock file was not made for, or a
switch that is neither 0 nor 1, in one line and before they create or install anything (`sh`,
the scripts' runner: conftest.py).  The interpreters here are stand-ins that answer every call as
Python 3.12 would answer the version query, or none at all (nothing must get as far as one)."""

from __future__ import annotations

import sys

import pytest

from cli_battery import assert_one_line_failure, tree


def _python312(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 3.12\n")
    path.chmod(0o755)
    return path


def test_an_interpreter_other_than_3_11_is_refused_before_the_venv_is_made(sh, tmp_path):
    """It made .venv with it and failed minutes into the install; every later run, the right
    interpreter given, kept that .venv."""
    python = _python312(tmp_path / "py" / "python3.12")
    assert_one_line_failure(*sh("setup.sh", PYTHON=str(python)), f"PYTHON={python}", "3.12", "not 3.11")
    assert not (tmp_path / "checkout" / ".venv").exists()


def test_an_unlocked_install_takes_another_python(sh, tmp_path):
    """Only the lock file is 3.11's: DEAMOE_UNLOCKED=1 resolves for the interpreter given (the
    stand-in then fails in the install, past the check)."""
    python = _python312(tmp_path / "py" / "python3.12")
    rc, err = sh("setup.sh", PYTHON=str(python), DEAMOE_UNLOCKED="1")
    assert rc != 0 and "not 3.11" not in err and ".venv/bin/python" in err, err


def test_a_venv_of_another_python_is_named_and_left_as_it_is(sh, tmp_path):
    venv = tmp_path / "checkout" / ".venv"
    _python312(venv / "bin" / "python")
    before = tree(venv)
    assert_one_line_failure(*sh("setup.sh", PYTHON=sys.executable), ".venv holds Python 3.12", "move it away")
    assert tree(venv) == before


@pytest.mark.parametrize("script, switch", [("setup.sh", "DEAMOE_UNLOCKED"), ("test.sh", "DEAMOE_SLURM_TEST"),
                                            ("test.sh", "DEAMOE_UNLOCKED")])
def test_a_switch_other_than_0_or_1_is_named_before_setup(sh, tmp_path, script, switch):
    """`yes` or `true` read as 0: the locked install instead of a fresh resolve, a test run
    without the SLURM cluster -- said, if at all, only in the summary after the whole suite."""
    assert_one_line_failure(*sh(script, PYTHON=str(tmp_path / "no-python"), **{switch: "yes"}),
                            f"{switch}='yes'", "0 or 1")
    assert not (tmp_path / "checkout" / ".venv").exists()


def test_an_argument_is_named_not_ignored(sh, tmp_path):
    """`setup.sh --unlocked` installed from the lock file as if nothing had been asked."""
    assert_one_line_failure(*sh("setup.sh", "--unlocked", PYTHON=str(tmp_path / "no-python")),
                            "takes no arguments", "'--unlocked'", "DEAMOE_UNLOCKED=1")


def test_test_paths_are_the_callers_and_an_options_value_is_kept(sh, tmp_path):
    """test.sh changed to the repository root before handing its arguments to pytest: `cd tests &&
    bash ../scripts/test.sh test_io.py` ran no test ("file or directory not found").  The .venv
    here is a stand-in that answers setup.sh and records what pytest would be given."""
    checkout, record = tmp_path / "checkout", tmp_path / "pytest-args"
    venv_python = checkout / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text('#!/bin/sh\n[ "$1 $2" = "-m pytest" ] || { echo 3.11; exit 0; }\n'
                           f'shift 2; printf "%s\\n" "$@" > "{record}"\n')
    venv_python.chmod(0o755)
    caller = checkout / "tests"
    rc, err = sh("test.sh", "test_io.py::test_x", "-k", "reliability", "reliability", "tests/test_shapes.py",
                 cwd=caller, PYTHON=str(venv_python))
    assert rc == 0, err
    here = caller.resolve()  # (a link into the repository: the shell names the folder itself)
    assert record.read_text().splitlines()[2:] == [
        f"{here}/test_io.py::test_x", "-k", "reliability", f"{here}/reliability",
        "tests/test_shapes.py"]  # (not in the caller's folder: the repository root's, as before)
