"""Fixtures: synthetic result trees in the documented formats (see report_fixtures.py)."""

import pytest

from report_fixtures import write_microbench, write_results


@pytest.fixture
def results(tmp_path):
    return write_results(tmp_path)


@pytest.fixture
def measured(tmp_path):
    folder = tmp_path / "measured" / "h200"
    write_microbench(folder)
    return tmp_path / "measured"
