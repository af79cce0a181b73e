"""downstream.csv / perplexity.csv from lm_eval.json files, with the paper's values beside."""

from __future__ import annotations

from pathlib import Path

import json
import math

import pytest

from deamoe.errors import DataError
from deamoe.ownership import OutputPathError
from deamoe import paper
from deamoe.eval.tables import build_tables, write_tables

# (not imported from conftest: several test folders have one, and which is found depends on order)
REPO = Path(__file__).resolve().parents[2]


def fake_result(model):
    return {
        "results": {
            "piqa": {"acc,none": 0.5, "acc_stderr,none": 0.1, "acc_norm,none": 0.75, "acc_norm_stderr,none": 0.05},
            "boolq": {"acc,none": 0.625, "acc_stderr,none": "N/A"},
            "ptb": {"word_perplexity,none": 70.0, "byte_perplexity,none": 2.0, "bits_per_byte,none": 1.0},
        },
        "n-samples": {"piqa": {"original": 1838, "effective": 8}, "boolq": {"original": 3270, "effective": 8},
                      "ptb": {"original": 1, "effective": 1}},
        "deamoe": {"model": model, "git_sha": "abc", "profile": "tiny", "limit_per_task": 8},
    }


def test_tables_put_paper_values_on_the_table_metric(tmp_path):
    for m in ("deamoe", "baseline"):
        (tmp_path / m).mkdir()
        (tmp_path / m / "lm_eval.json").write_text(json.dumps(fake_result(m)))
    down, ppl = build_tables(tmp_path)
    assert list(down.columns[:7]) == ["model", "task", "metric", "value", "stderr", "n", "paper_value"]
    piqa = down[(down.model == "deamoe") & (down.task == "piqa")].set_index("metric")
    assert piqa.loc["acc", "value"] == 50.0 and piqa.loc["acc_norm", "value"] == 75.0  # percent
    assert piqa.loc["acc_norm", "paper_value"] == 73.39 and math.isnan(piqa.loc["acc", "paper_value"])
    boolq = down[(down.model == "baseline") & (down.task == "boolq")].iloc[0]
    assert boolq.paper_value == 61.47 and math.isnan(boolq.stderr) and boolq.n == 8
    assert list(ppl.columns[:7]) == ["model", "dataset", "word_perplexity", "byte_perplexity",
                                     "bits_per_byte", "n", "paper_value"]
    row = ppl[ppl.model == "baseline"].iloc[0]
    assert row.dataset == "ptb" and row.word_perplexity == 70.0 and row.paper_value == 64.33
    assert (down.git_sha == "abc").all()
    d, p = write_tables(tmp_path, tmp_path / "out")
    assert d.read_text().startswith("model,task,metric,value,stderr,n,paper_value")


def test_the_two_tables_are_written_together(tmp_path, csv_write_fails):
    # perplexity.csv failing to be written (a full disk: one line naming it) leaves downstream.csv
    # as it was, not new beside an old perplexity table
    for m in ("deamoe", "baseline"):
        (tmp_path / m).mkdir()
        (tmp_path / m / "lm_eval.json").write_text(json.dumps(fake_result(m)))
    write_tables(tmp_path, tmp_path / "out")
    before = {p.name: p.read_text() for p in (tmp_path / "out").glob("*.csv")}
    doc = fake_result("deamoe")
    doc["results"]["piqa"]["acc,none"] = 0.25
    (tmp_path / "deamoe" / "lm_eval.json").write_text(json.dumps(doc))
    csv_write_fails(2)
    with pytest.raises(OutputPathError, match="perplexity.csv: No space left on device"):
        write_tables(tmp_path, tmp_path / "out")
    assert {p.name: p.read_text() for p in (tmp_path / "out").glob("*.csv")} == before


def test_no_results_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no \\*/lm_eval.json found"):
        build_tables(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "lm_eval.json").write_text("{}")
    with pytest.raises(DataError, match="missing key 'results'"):
        build_tables(tmp_path)


@pytest.mark.parametrize("block", [("n-samples",), ("deamoe",), ("deamoe", "corpora")])
def test_a_null_optional_block_reads_as_absent(tmp_path, block):
    """lm_eval.json's optional blocks (n-samples, deamoe, deamoe.corpora) given as null pass the
    reader as absent; the tables read them so too (they failed with an AttributeError)."""
    doc = fake_result("deamoe")
    doc["deamoe"]["corpora"] = {"ptb": {"words": 10, "tokens": 20}}
    (doc if len(block) == 1 else doc[block[0]])[block[-1]] = None
    (tmp_path / "deamoe").mkdir()
    (tmp_path / "deamoe" / "lm_eval.json").write_text(json.dumps(doc))
    down, ppl = build_tables(tmp_path)
    assert len(down) == 3 and ppl.word_perplexity.tolist() == [70.0]
    assert down.n.isna().all() == (block == ("n-samples",))


def test_paper_values_match_the_paper_text():
    """Every number of Tables 2 and 3 appears in the extracted paper text, DeaMoE then baseline."""
    seed = REPO.parent / "shared" / "seeds" / "000_104e20784e71d0e0.txt"
    if not seed.is_file():
        pytest.skip(f"the paper's text is not beside this checkout ({seed}): it lives in the "
                    "build machines' ../shared folder, which a clone does not carry")
    text = seed.read_text()
    t2 = text[text.index("Table 2. Accuracy results"):text.index("Attempt to enforce")]
    for _, _, v in paper.TABLE2_HARNESS.values():
        assert f"{v['deamoe']:g} {v['baseline']:g}" in t2.replace("32.80", "32.8")
    t3 = text[text.index("DeaMoE-7B Baseline-7B\n61.91"):][:120]
    for _, v in paper.TABLE3_HARNESS.values():
        assert f"{v['deamoe']:.2f} {v['baseline']:.2f}" in t3


def test_a_gpu_calls_short_sha_reads_in_the_12_digit_form(tmp_path):
    """An evaluation on a GPU machine records DEAMOE_GIT_SHA as given (its tree has no .git)."""
    from deamoe.provenance import _git

    head = _git(REPO, "rev-parse", "--short=12", "HEAD")
    if not head:
        pytest.skip("a checkout without git")
    for m, sha in (("deamoe", head[:7]), ("baseline", head)):
        (tmp_path / m).mkdir()
        doc = fake_result(m)
        doc["deamoe"]["git_sha"] = sha
        (tmp_path / m / "lm_eval.json").write_text(json.dumps(doc))
    down, ppl = build_tables(tmp_path)
    assert set(down.git_sha) == set(ppl.git_sha) == {head}
