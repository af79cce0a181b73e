"""deamoe.readers: a damaged file is a DataError naming it, never another exception."""

from __future__ import annotations

import pytest

from deamoe.errors import DataError
from deamoe.readers import read_json


def test_a_json_integer_of_thousands_of_digits_is_named(tmp_path):
    """Python refuses to read an integer of over 4300 digits (a ValueError): a hand-edited or
    foreign file must still be one line naming it, not "failed unexpectedly"."""
    path = tmp_path / "c1.json"
    path.write_text('{"concurrency": ' + "9" * 5000 + "}")
    with pytest.raises(DataError, match=r"c1.json: a JSON integer of 4300\+ digits; not a serving result"):
        read_json(path, "serving result")
