"""deamoe.train.tokenizer: a tokenizer named by data.tokenizer that does not load is one line
naming the key, whatever the loader raises."""

from __future__ import annotations

import pytest

from deamoe.errors import DataError
from deamoe.train.tokenizer import load_named


@pytest.mark.parametrize("text", ['{"bad": 1}', "{", ""])
def test_a_malformed_local_tokenizer_is_named(tmp_path, text):
    (tmp_path / "tokenizer.json").write_text(text)  # a KeyError, a JSON error, nothing
    with pytest.raises(DataError, match=r"^data.tokenizer='.*' could not be loaded \(\w+"):
        load_named(str(tmp_path))
