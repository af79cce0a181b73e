"""The `python -m deamoe.<module>` entry points outside the dispatcher answer in one line: the
roofline benchmark on a machine without CUDA (torch's assertion was a traceback), the server's
supervisor given a program that cannot be run (a FileNotFoundError traceback), and `--help`
to any of them (the supervisor ran '--help' as a program, the tile picks read it as a table)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cli_battery import REPO, assert_one_line_failure

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "CUDA_VISIBLE_DEVICES": ""}


def _module(work, *argv):
    done = subprocess.run([sys.executable, "-m", *argv], cwd=work, env=ENV, capture_output=True,
                          text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_the_roofline_benchmark_without_cuda_is_one_line(work):
    status, _, err = _module(work, "deamoe.kernels.stream_read_benchmark")
    assert status == 2
    assert_one_line_failure(status, err, "stream_read_benchmark", "needs a CUDA GPU")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("program, status, why", [("no-such-program-here", 127, "No such file"),
                                                  (".", 126, "Permission denied")])
def test_a_program_the_supervisor_cannot_run_is_one_line(work, program, status, why):
    got, _, err = _module(work, "deamoe.serve.supervise", program)
    assert got == status
    assert_one_line_failure(got, err, repr(program), why)


def test_the_supervisor_still_passes_its_programs_status_on(work):
    assert _module(work, "deamoe.serve.supervise", sys.executable, "-c", "raise SystemExit(3)")[0] == 3


@pytest.mark.parametrize("module", ["deamoe.serve.supervise", "deamoe.decode.picks", "deamoe.train.measure",
                                    "deamoe.commands.profile_step"])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_to_a_modules_entry_point_is_its_usage(work, module, flag):
    status, out, err = _module(work, module, flag)
    assert (status, err) == (0, ""), err
    assert out == f"usage: python -m {module} " + out.split(f"{module} ", 1)[1]
    assert len(out.splitlines()) == 1
    assert list(work.iterdir()) == []
