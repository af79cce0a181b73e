"""The shipped downstream-task data: validate each file and convert it to the harness's schema.

The files in data/eval/ keep their sources' own field names (see data/eval/SOURCES.md).  The
harness's built-in tasks read the field names of the Hugging Face hub datasets they were written
for, so each file is converted here, row by row, into exactly those fields; the built-in prompts,
choices and metrics then apply unchanged.  Every check names the file and the line at fault.

HellaSwag exists only as the llama.cpp text layout (6 lines per item); `hellaswag_docs` turns it
back into the hub's fields (activity_label, ctx_a, ctx_b, endings, label) -- see SOURCES.md.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from deamoe.errors import DataError, not_a_file


@dataclass(frozen=True)
class ShippedTask:
    task: str  # the harness's task name
    file: str  # file name in data/eval/
    split: str  # the split the harness evaluates (its data_files key)
    convert: Callable[[dict, "Where"], dict] | None  # JSONL rows; None: a special reader


class Where:
    """`file:line` of the row being checked; `need` raises a DataError naming it."""

    def __init__(self, path: Path, line: int):
        self.path, self.line = path, line

    def fail(self, msg: str):
        raise DataError(f"{self.path}:{self.line}: {msg}")

    def need(self, cond: bool, msg: str) -> None:
        if not cond:
            self.fail(msg)

    def text(self, row: dict, key: str, allow_empty: bool = False) -> str:
        value = row.get(key)
        self.need(isinstance(value, str), f"field {key!r} must be a string, got {value!r}"[:200])
        self.need(allow_empty or value.strip() != "", f"field {key!r} is empty")
        return value


def open_text(path: Path):
    """Shipped files are gzip-compressed (`.gz`); plain files work too.  The whole text is read
    (and checked: gzip stream, UTF-8) here, so a damaged file fails naming it, not mid-iteration."""
    from deamoe.readers import read_text

    if not path.is_file():
        raise DataError(f"{path}: {not_a_file(path)} (an evaluation data file, expected in eval.data_dir)")
    return io.StringIO(read_text(path))


def jsonl_rows(path: Path) -> Iterator[tuple[dict, Where]]:
    with open_text(path) as f:
        for i, line in enumerate(f, start=1):
            where = Where(path, i)
            if not line.strip():
                where.fail("empty line")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                where.fail(f"not valid JSON ({exc.msg})")
            where.need(isinstance(row, dict), "a row must be a JSON object")
            yield row, where


# ---- JSONL converters: source fields -> the hub fields the built-in task reads ----------------


def boolq(row: dict, w: Where) -> dict:
    # SuperGLUE val.jsonl stores label as a JSON boolean; the hub's aps/super_glue uses 0/1.
    w.need(isinstance(row.get("label"), bool), f"field 'label' must be true/false, got {row.get('label')!r}")
    return {"question": w.text(row, "question"), "passage": w.text(row, "passage"),
            "idx": row.get("idx"), "label": int(row["label"])}


def piqa(row: dict, w: Where) -> dict:
    label = row.get("label")
    w.need(label in (0, 1) and not isinstance(label, bool), f"field 'label' must be 0 or 1, got {label!r}")
    return {"goal": w.text(row, "goal"), "sol1": w.text(row, "sol1", True),
            "sol2": w.text(row, "sol2", True), "label": label}


def siqa(row: dict, w: Where) -> dict:
    label = row.get("label")
    w.need(str(label) in ("1", "2", "3"), f"field 'label' must be 1, 2 or 3, got {label!r}")
    out = {k: w.text(row, k) for k in ("context", "question", "answerA", "answerB", "answerC")}
    out["label"] = str(label)  # the hub's lighteval/siqa stores "1".."3"
    return out


def winogrande(row: dict, w: Where) -> dict:
    sentence = w.text(row, "sentence")
    w.need(sentence.count("_") == 1, "field 'sentence' must contain exactly one '_' blank")
    w.need(row.get("answer") in ("1", "2"), f"field 'answer' must be \"1\" or \"2\", got {row.get('answer')!r}")
    return {"sentence": sentence, "option1": w.text(row, "option1"), "option2": w.text(row, "option2"),
            "answer": row["answer"]}


def race(row: dict, w: Where) -> dict:
    # One RACE article file: parallel lists questions / options / answers.  EleutherAI/race keeps
    # one row per article with `problems` as a Python-literal string; the harness asks the last
    # question and shows the earlier ones (with their answers) as context.
    article = w.text(row, "article")
    qs, opts, ans = row.get("questions"), row.get("options"), row.get("answers")
    w.need(isinstance(qs, list) and qs, "field 'questions' must be a non-empty list")
    w.need(isinstance(opts, list) and len(opts) == len(qs), "field 'options' must be a list as long as 'questions'")
    w.need(isinstance(ans, list) and len(ans) == len(qs), "field 'answers' must be a list as long as 'questions'")
    problems = []
    for j, (q, o, a) in enumerate(zip(qs, opts, ans)):
        w.need(isinstance(q, str), f"questions[{j}] must be a string")
        w.need(isinstance(o, list) and len(o) == 4 and all(isinstance(x, str) for x in o),
               f"options[{j}] must be a list of 4 strings")
        w.need(a in ("A", "B", "C", "D"), f"answers[{j}] must be one of A-D, got {a!r}")
        problems.append({"answer": a, "options": o, "question": q})
    return {"example_id": row.get("id", ""), "article": article, "problems": repr(problems)}


ANLI_LABELS = {"e": 0, "n": 1, "c": 2}  # facebook/anli: 0 entailment, 1 neutral, 2 contradiction


def anli(row: dict, w: Where) -> dict:
    label = row.get("label")
    w.need(label in ANLI_LABELS, f"field 'label' must be e, n or c, got {label!r}")
    return {"uid": row.get("uid", ""), "premise": w.text(row, "context"),
            "hypothesis": w.text(row, "hypothesis"), "label": ANLI_LABELS[label],
            "reason": row.get("reason", "")}


def openbookqa(row: dict, w: Where) -> dict:
    # OpenBookQA Main jsonl nests question.stem / question.choices[{text,label}]; the hub's
    # allenai/openbookqa flattens them to question_stem and choices{text:[..], label:[..]}.
    q = row.get("question")
    w.need(isinstance(q, dict), "field 'question' must be an object with stem and choices")
    stem = w.text(q, "stem")
    choices = q.get("choices")
    w.need(isinstance(choices, list) and len(choices) >= 2, "field 'question.choices' must be a list")
    for j, c in enumerate(choices):
        w.need(isinstance(c, dict) and isinstance(c.get("text"), str) and isinstance(c.get("label"), str),
               f"question.choices[{j}] must have string text and label")
    labels = [c["label"] for c in choices]
    key = row.get("answerKey")
    w.need(isinstance(key, str) and key.strip() in labels, f"field 'answerKey' must be one of {labels}, got {key!r}")
    return {"id": row.get("id", ""), "question_stem": stem,
            "choices": {"text": [c["text"] for c in choices], "label": labels}, "answerKey": key}


# ---- HellaSwag: the llama.cpp text layout -> the hub's fields ---------------------------------

# The context's last sentence, when it starts in lower case, is the unfinished sentence the
# endings complete: HellaSwag's ctx_b (the harness capitalises it: ctx_a + " " + ctx_b.capitalize()).
_CTX_B = re.compile(r"^(?P<a>.*[.!?])\s+(?P<b>[a-z][^.!?]*)$")


def split_context(ctx: str) -> tuple[str, str]:
    m = _CTX_B.match(ctx)
    return (m.group("a"), m.group("b")) if m else (ctx, "")


def hellaswag_docs(path: Path) -> Iterator[tuple[dict, Where]]:
    with open_text(path) as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) % 6:
        Where(path, len(lines)).fail(f"{len(lines)} lines is not a multiple of 6 (context, label, 4 endings)")
    for start in range(0, len(lines), 6):
        w = Where(path, start + 1)
        head, label, endings = lines[start], lines[start + 1], lines[start + 2:start + 6]
        w.need(": " in head, "context line must read 'activity label: context'")
        activity, ctx = head.split(": ", 1)
        w.need(activity.strip() != "" and ctx.strip() != "", "empty activity label or context")
        Where(path, start + 2).need(label in ("0", "1", "2", "3"), f"label line must be 0-3, got {label!r}")
        for j, e in enumerate(endings):
            Where(path, start + 3 + j).need(e.strip() != "", "empty ending")
        ctx_a, ctx_b = split_context(ctx)
        yield ({"ind": start // 6, "activity_label": activity, "ctx_a": ctx_a, "ctx_b": ctx_b,
                "ctx": ctx, "endings": endings, "source_id": "", "split": "val",
                "split_type": "", "label": label}, w)


# ---- the table of shipped tasks ---------------------------------------------------------------

DOWNSTREAM: dict[str, ShippedTask] = {
    t.task: t
    for t in [
        ShippedTask("boolq", "boolq.jsonl.gz", "validation", boolq),
        ShippedTask("piqa", "piqa.jsonl.gz", "validation", piqa),
        ShippedTask("social_iqa", "siqa.jsonl.gz", "validation", siqa),
        ShippedTask("hellaswag", "hellaswag_val_first1000_llamacpp_format.txt.gz", "validation", None),
        ShippedTask("winogrande", "winogrande.jsonl.gz", "validation", winogrande),
        ShippedTask("race", "race_high.jsonl.gz", "test", race),
        ShippedTask("anli_r1", "anli_r1.jsonl.gz", "test_r1", anli),
        ShippedTask("anli_r2", "anli_r2.jsonl.gz", "test_r2", anli),
        ShippedTask("anli_r3", "anli_r3.jsonl.gz", "test_r3", anli),
        ShippedTask("openbookqa", "openbookqa.jsonl.gz", "test", openbookqa),
    ]
}


def task_docs(task: str, data_dir: str | Path) -> list[dict]:
    """All rows of a shipped task, validated and converted to the hub schema the harness reads."""
    spec = DOWNSTREAM[task]
    path = Path(data_dir) / spec.file
    if spec.convert is None:
        docs = [doc for doc, _ in hellaswag_docs(path)]
    else:
        docs = [spec.convert(row, where) for row, where in jsonl_rows(path)]
    if not docs:
        raise DataError(f"{path}: no rows")
    return docs


def write_jsonl(path: Path, docs: list[dict]) -> None:
    from deamoe.io import write_text

    write_text(path, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
