"""The GPU scripts' time limit and output folder as users mistype them, on the CPU: one line and a
nonzero exit before any work, nothing written.  (`sh`, the scripts' runner: conftest.py.)"""

from __future__ import annotations

import pytest

from cli_battery import assert_one_line_failure


def test_h200_microbench_names_a_time_limit_timeout_would_drop(sh, tmp_path):
    """`timeout 99999999999999999999 ...` runs without a limit, where the call meant one."""
    status, err = sh("h200_microbench.sh", OUT=str(tmp_path / "o"), DEAMOE_GIT_SHA="abc1234",
                     T_MB="99999999999999999999")
    assert_one_line_failure(status, err, "T_MB", "below 10^9")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("out, names", [("-", ["-/log.txt", "stdout"]), ("sub/..", ["'..' after", "sub"])])
def test_h200_microbench_names_an_output_folder_that_is_not_where_it_reads(sh, tmp_path, out, names):
    before = sorted(tmp_path.iterdir())
    status, err = sh("h200_microbench.sh", cwd=tmp_path, OUT=out, DEAMOE_GIT_SHA="abc1234")
    assert_one_line_failure(status, err, *names)
    assert sorted(tmp_path.iterdir()) == before


def test_gpu_run_names_an_archive_folder_with_dot_dot_after_nothing(sh, tmp_path):
    """sub/.. is the working folder once sub is made: its archives would land beside the user's files."""
    before = sorted(tmp_path.iterdir())
    status, err = sh("gpu_run.sh", "sub/..", "all", cwd=tmp_path)
    assert_one_line_failure(status, err, "results.tar.gz", "'..' after")
    assert sorted(tmp_path.iterdir()) == before
