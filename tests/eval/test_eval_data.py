"""Every shipped evaluation file validates, converts into the fields its harness task reads, and
bad rows fail with a DataError naming the file and line."""

from __future__ import annotations

from pathlib import Path

import gzip
import json
import shutil

import pytest

from deamoe.errors import DataError
from deamoe.eval import data
from deamoe.eval.data import DOWNSTREAM, split_context, task_docs

# (not imported from conftest: several test folders have one, and which is found depends on order)
REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "data" / "eval"

ROWS = {"boolq": 3270, "piqa": 1838, "social_iqa": 1954, "hellaswag": 1000, "winogrande": 1267,
        "race": 1045, "anli_r1": 1000, "anli_r2": 1000, "anli_r3": 1200, "openbookqa": 500}

# the fields each built-in task's templates / process_docs read (lm_eval/tasks/*/...yaml)
FIELDS = {
    "boolq": {"passage", "question", "label"},
    "piqa": {"goal", "sol1", "sol2", "label"},
    "social_iqa": {"context", "question", "answerA", "answerB", "answerC", "label"},
    "hellaswag": {"activity_label", "ctx_a", "ctx_b", "endings", "label"},
    "winogrande": {"sentence", "option1", "option2", "answer"},
    "race": {"article", "problems"},
    "anli_r1": {"premise", "hypothesis", "label"},
    "anli_r2": {"premise", "hypothesis", "label"},
    "anli_r3": {"premise", "hypothesis", "label"},
    "openbookqa": {"question_stem", "choices", "answerKey"},
}


@pytest.mark.parametrize("task", sorted(DOWNSTREAM))
def test_shipped_file_validates_and_has_task_fields(task):
    docs = task_docs(task, DATA_DIR)
    assert len(docs) == ROWS[task]
    for doc in docs:
        assert FIELDS[task] <= doc.keys()


def test_labels_map_to_the_hub_conventions():
    assert {d["label"] for d in task_docs("boolq", DATA_DIR)} == {0, 1}
    assert {d["label"] for d in task_docs("social_iqa", DATA_DIR)} == {"1", "2", "3"}
    assert {d["label"] for d in task_docs("anli_r1", DATA_DIR)} == {0, 1, 2}
    obqa = task_docs("openbookqa", DATA_DIR)[0]
    assert obqa["choices"]["label"] == ["A", "B", "C", "D"] and obqa["answerKey"] == "B"
    assert obqa["choices"]["text"][1] == "quit eating lunch out"


def test_race_problems_keep_question_order_and_answers():
    import ast

    with gzip.open(DATA_DIR / "race_high.jsonl.gz", "rt") as f:
        raw = json.loads(f.readline())
    problems = ast.literal_eval(task_docs("race", DATA_DIR)[0]["problems"])
    assert [p["question"] for p in problems] == raw["questions"]
    assert [p["answer"] for p in problems] == raw["answers"]
    assert [p["options"] for p in problems] == raw["options"]


def test_hellaswag_rebuilds_the_harness_query():
    from lm_eval.tasks.hellaswag.utils import preprocess

    doc = task_docs("hellaswag", DATA_DIR)[0]
    query = preprocess(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())
    assert query == "Roof shingle removal: A man is sitting on a roof. He"
    assert doc["label"] == "3" and doc["endings"][3] == "starts pulling up roofing on a roof."


@pytest.mark.parametrize("ctx,expected", [
    ("A lady walks to a barbell. She bends down. the lady", ("A lady walks to a barbell. She bends down.", "the lady")),
    ("A man is sitting on a roof. he", ("A man is sitting on a roof.", "he")),
    ("People are dancing. They", ("People are dancing. They", "")),  # upper-case tail: no ctx_b
])
def test_split_context(ctx, expected):
    assert split_context(ctx) == expected


def _copy_with(tmp_path, name, text):
    d = tmp_path / "eval"
    shutil.copytree(DATA_DIR, d)
    with gzip.open(d / name, "wt") as f:
        f.write(text)
    return d


def _lines(name, n=3):
    with gzip.open(DATA_DIR / name, "rt") as f:
        return [next(f) for _ in range(n)]


@pytest.mark.parametrize("task,name,mutate,msg", [
    ("boolq", "boolq.jsonl.gz", lambda r: r.update(label="true"), "'label' must be true/false"),
    ("piqa", "piqa.jsonl.gz", lambda r: r.pop("goal"), "'goal' must be a string"),
    ("social_iqa", "siqa.jsonl.gz", lambda r: r.update(label=4), "'label' must be 1, 2 or 3"),
    ("winogrande", "winogrande.jsonl.gz", lambda r: r.update(sentence="no blank"), "exactly one '_'"),
    ("race", "race_high.jsonl.gz", lambda r: r["answers"].pop(), "as long as 'questions'"),
    ("anli_r2", "anli_r2.jsonl.gz", lambda r: r.update(label="x"), "must be e, n or c"),
    ("openbookqa", "openbookqa.jsonl.gz", lambda r: r.update(answerKey="Z"), "'answerKey' must be one of"),
])
def test_bad_row_names_file_and_line(tmp_path, task, name, mutate, msg):
    lines = _lines(name)
    row = json.loads(lines[1])
    mutate(row)
    d = _copy_with(tmp_path, name, lines[0] + json.dumps(row) + "\n" + lines[2])
    with pytest.raises(DataError, match=rf"{name}:2: .*{msg}"):
        task_docs(task, d)


def test_invalid_json_and_missing_file(tmp_path):
    d = _copy_with(tmp_path, "piqa.jsonl.gz", _lines("piqa.jsonl.gz")[0] + "{not json\n")
    with pytest.raises(DataError, match=r"piqa.jsonl.gz:2: not valid JSON"):
        task_docs("piqa", d)
    (d / "boolq.jsonl.gz").unlink()
    with pytest.raises(DataError, match=r"boolq.jsonl.gz: no such file \(an evaluation data file"):
        task_docs("boolq", d)


def test_hellaswag_bad_label_and_truncated_file(tmp_path):
    name = "hellaswag_val_first1000_llamacpp_format.txt.gz"
    good = _lines(name, 12)
    d = _copy_with(tmp_path, name, "".join(good[:7] + ["x\n"] + good[8:]))
    with pytest.raises(DataError, match=rf"{name}:8: label line must be 0-3"):
        task_docs("hellaswag", d)
    d2 = _copy_with(tmp_path / "b", name, "".join(good[:10]))
    with pytest.raises(DataError, match=rf"{name}:10: 10 lines is not a multiple of 6"):
        task_docs("hellaswag", d2)


def test_write_jsonl_round_trip(tmp_path):
    docs = task_docs("anli_r3", DATA_DIR)[:3]
    data.write_jsonl(tmp_path / "x.jsonl", docs)
    assert [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()] == docs
