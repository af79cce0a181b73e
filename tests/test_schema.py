"""deamoe.schema: a --config value handed over as strings is typed as a config file's would be,
against the section's schema -- text stays text where the schema takes text only."""

from __future__ import annotations

from deamoe.schema import load, property_schema, typed_leaves


def test_text_keys_keep_what_was_written_and_numbers_become_numbers():
    data, pretrain = load("data"), load("pretrain")
    assert typed_leaves({"tokenizer": "0123", "vocab_size": "2048", "files": ["2024"]}, data) == {
        "tokenizer": "0123", "vocab_size": 2048, "files": ["2024"]}
    # a size's schema is additionalProperties; mappings inside its lists are typed too
    sizes = typed_leaves({"tiny": {"lr": "1.0e-3", "extra_seeds": [{"steps": "300", "seeds": ["5"]}]}},
                         property_schema(pretrain, "sizes"))
    assert sizes == {"tiny": {"lr": 1.0e-3, "extra_seeds": [{"steps": 300, "seeds": [5]}]}}
    assert typed_leaves({"size": ""}, load("ablation")) == {"size": ""}  # written '': not null
    assert property_schema(data, "no_such_key") == {} and property_schema(None, "x") == {}
