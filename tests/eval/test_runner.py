"""End to end: a tiny DeaMoE checkpoint evaluated offline by lm-eval on a few rows of every task;
the re-pointed built-in tasks render the prompts they render on hub data; online fails cleanly."""

from __future__ import annotations

from pathlib import Path

import json
import math
import socket
import subprocess
import sys

import pytest

from deamoe.errors import DeaMoEError
from deamoe.eval import runner
from deamoe.eval.settings import ALL_TASKS, EvalSettings

# (not imported from conftest: several test folders have one, and which is found depends on order)
REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "data" / "eval"


def settings(tmp_path, **kw) -> EvalSettings:
    kw.setdefault("limit", 2)
    kw.setdefault("ppl_max_chars", 3000)
    return EvalSettings(data_dir=str(DATA_DIR), hf_home=str(tmp_path / "hf"), **kw)


def test_tiny_model_every_task_offline(tmp_path, tiny_checkpoint):
    out = tmp_path / "deamoe"
    res = runner.run_eval(settings(tmp_path), tiny_checkpoint, "deamoe", out)
    saved = json.loads((out / "lm_eval.json").read_text())
    assert saved["deamoe"]["model"] == "deamoe" and saved["deamoe"]["git_sha"]
    for task in ALL_TASKS:
        assert task in saved["results"], task
        assert saved["n-samples"][task]["effective"] <= 2
    for task in ("boolq", "piqa", "hellaswag", "race", "anli_r3", "openbookqa"):
        assert saved["n-samples"][task]["effective"] == 2
        assert 0.0 <= saved["results"][task]["acc,none"] <= 1.0
    for task in ("ptb", "wikitext2", "wikitext103"):
        ppl = saved["results"][task]["word_perplexity,none"]
        assert math.isfinite(ppl) and ppl > 1.0
        metrics = saved["results"][task]
        # the harness's three perplexity metrics are one log-likelihood: bits per byte = log2 of
        # the byte perplexity
        assert metrics["bits_per_byte,none"] == pytest.approx(math.log2(metrics["byte_perplexity,none"]))
    # WikiText-103 raw test == WikiText-2 raw test: same documents, same numbers
    assert saved["results"]["wikitext2"]["word_perplexity,none"] == \
        saved["results"]["wikitext103"]["word_perplexity,none"]
    assert res["results"].keys() == saved["results"].keys()
    # and the tables command reads it
    from deamoe.eval.tables import build_tables

    down, ppl = build_tables(tmp_path)
    assert set(down.task) == set(ALL_TASKS[:10]) and set(ppl.dataset) == {"ptb", "wikitext103", "wikitext2"}


def test_repointed_tasks_render_the_builtin_prompts(tmp_path):
    s = settings(tmp_path)
    runner.set_hf_environment(s)
    runner.prepare_data(s, tmp_path)
    names = runner.write_tasks(s, tmp_path)
    from lm_eval.tasks import TaskManager

    tasks = TaskManager(include_path=str(tmp_path / "tasks")).load(names)["tasks"]
    assert set(tasks) == set(ALL_TASKS)

    def first(name):
        t = tasks[name]
        doc = next(iter(t.eval_docs))
        return t, doc

    t, d = first("hellaswag")
    assert t.doc_to_text(d) == "Roof shingle removal: A man is sitting on a roof. He"
    assert t.doc_to_target(d) == 3 and len(t.doc_to_choice(d)) == 4
    t, d = first("boolq")
    assert t.doc_to_text(d).endswith("\nQuestion: does ethanol take more energy make that produces?\nAnswer:")
    assert t.doc_to_choice(d) == ["no", "yes"] and t.doc_to_target(d) == 0
    t, d = first("anli_r1")
    assert t.doc_to_text(d).endswith("True, False, or Neither?\nAnswer:") and t.doc_to_target(d) == "True"
    t, d = first("social_iqa")
    assert t.doc_to_text(d).startswith("Q: Tracy didn't go home") and t.doc_to_target(d) == 2
    t, d = first("openbookqa")
    assert t.doc_to_target(d) == 1 and t.doc_to_choice(d)[1] == "quit eating lunch out"
    t, d = first("race")
    assert t.doc_to_text(d).startswith("Article: ") and t.doc_to_target(d) in (0, 1, 2, 3)
    t, d = first("winogrande")
    assert t.doc_to_choice(d) == ["Sarah was a much better surgeon than Maria so Sarah",
                                  "Sarah was a much better surgeon than Maria so Maria"]
    t, d = first("ptb")
    assert t.doc_to_target(d).startswith("no it wasn't black monday\n")


def test_online_without_network_fails_in_one_line(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(DeaMoEError, match=r"^eval\.online is true but huggingface\.co cannot be reached") as e:
        runner.run_eval(settings(tmp_path, online=True), tmp_path / "none", "deamoe", tmp_path / "out")
    assert "\n" not in str(e.value)


def test_missing_checkpoint_is_a_data_error(tmp_path):
    with pytest.raises(DeaMoEError, match="not a checkpoint directory"):
        runner.run_eval(settings(tmp_path, tasks=("boolq",)), tmp_path / "nope", "deamoe", tmp_path / "o")
    # a training run's folder: its checkpoint is one level down
    (tmp_path / "run" / "checkpoint").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint" / "config.json").write_text("{}")
    with pytest.raises(DeaMoEError, match=r"no config.json\); the run's checkpoint is .*run/checkpoint$"):
        runner.run_eval(settings(tmp_path, tasks=("boolq",)), tmp_path / "run", "deamoe",
                        tmp_path / "o")


def test_cli_bad_config_key_exits_2_with_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("eval:\n  limt: 3\n")
    p = subprocess.run([sys.executable, "-m", "deamoe", "eval", "--config", str(cfg), "--checkpoint", "x",
                        "--model", "deamoe", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       cwd=REPO)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"error: config file {cfg}: unknown key eval.limt (known: batch_size, bootstrap_iters, "
                                             "data_dir, device, dtype, hf_home, limit, log_samples, max_length, "
                                             "num_fewshot, online, ppl_max_chars, seed, seeds, tasks)"]


def test_task_subset_writes_only_those_tasks(tmp_path):
    import yaml

    s = settings(tmp_path, tasks=("piqa", "ptb"))
    runner.prepare_data(s, tmp_path)
    assert sorted(p.name for p in (tmp_path / "data").glob("*.jsonl")) == ["piqa.jsonl", "ptb.jsonl"]
    assert runner.write_tasks(s, tmp_path) == ["deamoe_downstream", "ptb"]
    group = yaml.safe_load((tmp_path / "tasks" / "deamoe_downstream.yaml").read_text())
    (entry,) = group["task"]
    assert entry["task"] == "piqa" and entry["training_split"] is None
    assert entry["dataset_kwargs"]["data_files"]["validation"] == str((tmp_path / "data" / "piqa.jsonl").resolve())
    assert "@DATA_DIR@" not in (tmp_path / "tasks" / "ptb.yaml").read_text()


def test_cli_eval_data_validates_every_file():
    p = subprocess.run([sys.executable, "-m", "deamoe", "eval-data"], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 13 and all(line.endswith("ok") for line in lines)


@pytest.mark.slow  # ~30 s: every row of all 13 tasks through the harness's templates
def test_every_shipped_row_renders_in_its_harness_task(tmp_path):
    """All rows (not only the first few) go through the built-in tasks' templates without error,
    with a gold answer among the choices."""
    s = settings(tmp_path, ppl_max_chars=0)
    runner.set_hf_environment(s)
    runner.prepare_data(s, tmp_path)
    from lm_eval.tasks import TaskManager

    names = runner.write_tasks(s, tmp_path)
    tasks = TaskManager(include_path=str(tmp_path / "tasks")).load(names)["tasks"]
    counts = {}
    for name, task in tasks.items():
        docs = list(task.eval_docs)
        counts[name] = len(docs)
        for doc in docs:
            if task.OUTPUT_TYPE == "loglikelihood_rolling":
                assert task.doc_to_target(doc).strip()
                continue
            text, choices, gold = task.doc_to_text(doc), task.doc_to_choice(doc), task.doc_to_target(doc)
            if name == "winogrande":  # partial scoring: choices are the contexts, text the gold index
                assert text in (0, 1) and len(choices) == 2
                continue
            assert isinstance(text, str) and text.strip()
            gold = choices.index(gold) if isinstance(gold, str) else gold
            assert 0 <= gold < len(choices), (name, doc)
    assert counts == {"boolq": 3270, "piqa": 1838, "social_iqa": 1954, "hellaswag": 1000, "winogrande": 1267,
                      "race": 1045, "anli_r1": 1000, "anli_r2": 1000, "anli_r3": 1200, "openbookqa": 500,
                      "ptb": 1, "wikitext103": 62, "wikitext2": 62}
