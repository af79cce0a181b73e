"""Values valid alone but conflicting with each other: one shared check, one line each naming the
keys, run by every command on its --config and by the workflow before any job (`snakemake -n`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from deamoe.checks import config_problems

from cli_battery import REPO, write_config

CONFLICTS = [
    ({"ablation": {"h_ffn": 32, "n_dept": 8, "n_expert": 48, "k_dept": 4, "k_expert": 8, "k_dept": 9}}, "ablation.k_dept=9 must be <= ablation.n_dept=8"),
    ({"ablation": {"h_ffn": 32, "n_dept": 8, "n_expert": 48, "k_dept": 4, "k_expert": 8, "n_expert": 50}}, "ablation.n_expert=50 must be divisible by ablation.n_dept=8"),
    ({"ablation": {"h_ffn": 32, "n_dept": 8, "n_expert": 48, "k_dept": 4, "k_expert": 8, "k_expert": 60}}, "ablation.k_expert=60 must be <= ablation.n_expert=48"),
    ({"ablation": {"h_ffn": 32, "n_dept": 8, "n_expert": 48, "k_dept": 4, "k_expert": 8, "k_expert": 40, "k_dept": 2}}, "ablation.k_expert=40 exceeds the experts of ablation.k_dept=2"),
    ({"ablation": {"h_ffn": 32, "n_dept": 8, "n_expert": 48, "k_dept": 4, "k_expert": 8, "k_expert": 2}}, "ablation.k_expert=2 must be >= ablation.k_dept=4 for variant(s) no6"),
    ({"model": {"num_attention_heads": 5}}, "model.hidden_size=64 is not divisible by model.num_attention_heads=5"),
    ({"model": {"num_attention_heads": 8, "num_key_value_heads": 3}},
     "model.num_attention_heads=8 is not divisible by model.num_key_value_heads=3"),
    ({"model": {"hidden_size": 52}}, "model.hidden_size=52 / model.num_attention_heads=4 = 13 must be even"),
    ({"train": {"micro_batch_size": 3}}, "train.batch_size must be a multiple of train.micro_batch_size (got 8 and 3)"),
    ({"train": {"nproc_per_node": 3}}, "train.batch_size=8 does not split into train.nproc_per_node=3 ranks"),
    ({"train": {"nproc_per_node": 2, "micro_batch_size": 8}}, "train.nproc_per_node=2"),
    ({"pretrain": {"sizes": {"tiny": {"deamoe": {"h_ffn": 24, "n_dept": 7, "n_expert": 48, "k_dept": 4,
                                                 "k_expert": 8}}}}},
     "pretrain.sizes.tiny.deamoe.n_expert=48 must be divisible by pretrain.sizes.tiny.deamoe.n_dept=7"),
    ({"pretrain": {"sizes": {"tiny": {"baseline": {"n_expert": 32, "k_expert": 40}}}}},
     "pretrain.sizes.tiny.baseline.k_expert=40 must be <= pretrain.sizes.tiny.baseline.n_expert=32"),
    ({"pretrain": {"sizes": {"tiny": {"deamoe": {"h_ffn": 24, "n_dept": 8, "n_expert": 128, "k_dept": 4,
                                                 "k_expert": 8}}}}},
     "pretrain.sizes.tiny.deamoe is not budget-matched to its baseline"),
    ({"pretrain": {"sizes": {"tiny": {"deamoe": {"h_ffn": 24, "n_dept": 8, "k_dept": 4, "k_expert": 8}}}}},
     "pretrain.sizes.tiny.deamoe: missing key n_expert"),
    ({"pretrain": {"sizes": {"tiny": {"num_attention_heads": 5}}}}, "pretrain.sizes.tiny: hidden_size 64"),
    ({"ablation": {"size": "huge"}}, "ablation.size 'huge' is not in pretrain.sizes"),
    ({"data": {"source": "files", "files": []}}, "data.files must name at least one file"),
    ({"data": {"source": "bundled", "files": ["my/*.txt"]}}, "data.source=bundled does not read it"),
    ({"serve": {"tpot_budgets_ms": [20.0, 20.0]}}, "serve.tpot_budgets_ms must be distinct values"),
    ({"microbench": {"batches": [4, 16, 4]}}, "microbench.batches must be distinct values"),
    ({"serve": {"input_len": 300}}, "serve.input_len + serve.output_len (+16) = 380 is more than the models' context"),
    ({"serve": {"max_model_len": 50}}, "serve.max_model_len=50 is less than serve.input_len + serve.output_len"),
    ({"serve": {"max_num_seqs": 4}}, "serve.max_num_seqs=4 is less than max(serve.concurrency)=32"),
    # an option the serve command sets itself, given again: vLLM took the later one without a word
    ({"serve": {"extra_server_args": ["--dtype", "bfloat16"]}}, "serve.extra_server_args gives --dtype, which serve.dtype sets"),
    ({"serve": {"extra_server_args": ["--port=8000"]}}, "gives --port, which the serve command (a free port) sets"),
    ({"serve": {"extra_server_args": ["--max_model_len", "64"]}}, "gives --max-model-len, which serve.max_model_len"),
    ({"eval": {"max_length": 4096}}, "eval.max_length=4096 is more than the models' context"),
    ({"eval": {"num_fewshot": 2}}, "eval.num_fewshot must be 0 offline"),
    ({"analysis": {"loading_trials": 1}}, "analysis.loading_trials=1 must be >= 2"),
    ({"eval": {"seeds": [0, 5]}}, "eval.seeds: 5 is not a seed of any pre-training size (they train seeds 0"),
    # the seeds left out of eval.seeds get the perplexity corpora alone: their jobs had no task
    ({"eval": {"seeds": [0], "tasks": ["boolq"]}, "pretrain": {"seeds": [0, 1]}},
     "eval.seeds leaves seed(s) 1 the perplexity corpora alone, but eval.tasks has none"),
]


def _doc(**sections) -> dict:
    doc = yaml.safe_load((REPO / "config.yaml").read_text())
    for name, values in sections.items():
        doc[name] = {**doc[name], **values}
    return doc


def test_the_default_config_has_no_problem():
    assert config_problems(_doc()) == []
    assert config_problems(_doc(serve={"extra_server_args": ["--disable-log-stats"]})) == []


@pytest.mark.parametrize("sections, line", CONFLICTS, ids=[c[1][:50] for c in CONFLICTS])
def test_each_conflict_is_one_line_naming_the_keys(sections, line):
    problems = config_problems(_doc(**sections))
    assert any(line in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_every_conflict_of_one_config_is_reported():
    doc = _doc(ablation={"n_dept": 8, "k_dept": 9, "n_expert": 50, "k_expert": 8}, model={"num_attention_heads": 5},
               train={"micro_batch_size": 3})
    problems = config_problems(doc)
    for line in ("ablation.k_dept=9", "ablation.n_expert=50", "model.num_attention_heads=5",
                 "train.micro_batch_size"):
        assert sum(line in p for p in problems) >= 1, (line, problems)


@pytest.mark.parametrize("sections, line", CONFLICTS[::4], ids=[c[1][:50] for c in CONFLICTS[::4]])
def test_commands_stop_on_the_same_conflicts(work, failing, sections, line):
    write_config(work / "c.yaml", **sections)
    failing(["loading", "--config", "c.yaml", "--out", "l.csv"], "c.yaml", line)


def test_dry_run_reports_every_conflict_before_any_job(tmp_path):
    """`snakemake -n` lists each conflicting value on its own line and runs (and writes) nothing."""
    import os

    work = tmp_path / "main"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {"results", "logs", "reports", ".snakemake", ".git", ".venv"}:
            (work / entry.name).symlink_to(entry)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "ablation": {"n_dept": 8, "k_dept": 9, "n_expert": 50, "k_expert": 60},
        "model": {"num_attention_heads": 5},
        "train": {"micro_batch_size": 3},
        "serve": {"input_len": 300},
    }))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
                           "-n", "--cores", "1", "--configfile", str(bad)],
                          cwd=work, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for line in ("config: ablation.k_expert=60 must be <= ablation.n_expert=50",
                 "config: ablation.k_dept=9 must be <= ablation.n_dept=8",
                 "config: ablation.n_expert=50 must be divisible by ablation.n_dept=8",
                 "config: model.hidden_size=64 is not divisible by model.num_attention_heads=5",
                 "config: train.batch_size must be a multiple of train.micro_batch_size (got 8 and 3)",
                 "config: serve.input_len + serve.output_len (+16) = 380"):
        assert any(l.strip().startswith(line) for l in out.splitlines()), (line, out[-3000:])
    assert "Traceback" not in out
    assert not (work / "results").exists() and not (work / "logs").exists()


def test_an_evaluation_file_that_is_a_pipe_or_a_dangling_link_is_named_as_such(tmp_path):
    """"lacks ptb_test.txt.gz" for a file that is right there (a pipe, a link whose target moved)
    sent the user looking for a missing file."""
    import os
    import shutil

    from deamoe.checks import path_problems

    shutil.copytree(REPO / "data" / "eval", tmp_path / "ev")
    (tmp_path / "ev" / "ptb_test.txt.gz").unlink()
    os.mkfifo(tmp_path / "ev" / "ptb_test.txt.gz")
    (tmp_path / "ev" / "boolq.jsonl.gz").unlink()
    (tmp_path / "ev" / "boolq.jsonl.gz").symlink_to("moved.gz")
    doc = yaml.safe_load((REPO / "config.yaml").read_text())
    doc["eval"] = {**doc["eval"], "data_dir": str(tmp_path / "ev"), "tasks": ["boolq", "ptb"]}
    (line,) = path_problems(doc)
    assert "lacks boolq.jsonl.gz (a link to moved.gz, which does not exist), ptb_test.txt.gz (not a " \
           "regular file (a device, pipe or socket))" in line, line


@pytest.mark.parametrize("gpu, problem", [("h200", False), ("H200", True), ("h100", True), ("..", True), (".", True)])
def test_a_measured_gpu_naming_no_committed_folder_is_named_before_any_job(tmp_path, monkeypatch, gpu, problem):
    """A misspelt report.measured_gpu showed every committed GPU table of the report as "not run"
    ('..' read reports/ itself), said only inside the report."""
    from deamoe.checks import path_problems

    (tmp_path / "reports" / "measured" / "h200").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    doc = yaml.safe_load((REPO / "config.yaml").read_text())
    doc["eval"]["data_dir"] = str(REPO / "data" / "eval")
    doc["report"] = {**doc["report"], "measured_gpu": gpu}
    lines = path_problems(doc)
    assert lines == ([f"report.measured_gpu {gpu!r} names no folder of reports/measured/ (there: h200); the "
                      "report shows the committed GPU tables of one of them"] if problem else []), lines


def test_perplexity_only_without_a_perplexity_task_is_named_before_the_model_loads(work, failing):
    """It loaded the model, then stopped in lm-eval ("No tasks specified") as a fault of the program."""
    write_config(work / "c.yaml", eval={"tasks": ["boolq"]})
    failing(["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e",
             "--perplexity-only"], "--perplexity-only", "eval.tasks has no perplexity corpus")


@pytest.mark.parametrize("section, value", [("train", 5), ("report", [1]), ("analysis", "x")])
def test_a_section_that_is_no_mapping_is_named_once(section, value):
    """The top level's "train: 5 is not of type 'object'" was followed on the same line by the
    section's own parser or schema saying it again ("train must be a mapping, got int")."""
    assert config_problems({section: value}) == [f"{section}: {value!r} is not of type 'object'"]
