"""The whole DAG resolves (dry run), bad config fails before any job, the resolved config."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

# every rule of the pipeline, and how many jobs of each the default DAG has
# (7 training runs: Table 4's No.1 is the tiny DeaMoE run, trained once)
EXPECTED_JOBS = {"table1": 1, "loading": 1, "data": 1, "train": 7, "ablation": 1, "pretrain": 1,
                 "eval": 2, "eval_tables": 1, "quality": 1, "serve": 2, "serve_tables": 1,
                 "microbench": 1, "report": 1, "all": 1}


def _job_counts(text: str) -> dict[str, int]:
    block = text.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^(\w+)\s+(\d+)$", block, flags=re.M) if m.group(1) != "total"}


def test_dry_run_plans_every_stage_and_writes_nothing(snakemake, workdir):
    proc = snakemake(workdir, "-n", "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _job_counts(proc.stdout + proc.stderr) == EXPECTED_JOBS
    # the report outputs are what `all` asks for
    assert "reports/figures/figure4_5_microbench.png" in proc.stdout + proc.stderr
    # parsing writes nothing: a dry run, a listing, a dry run with other settings
    for args in (["--list"], ["-n", "--cores", "1", "--config", "train={'steps': 70}"]):
        assert snakemake(workdir, *args).returncode == 0
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


def test_a_dry_run_into_a_closed_pipe_breaks_in_snakemakes_logger_only(workdir):
    """`snakemake -n | head -1`: Snakemake's own logger writes the job list to stdout and ends in
    its BrokenPipeError traceback once the reader is gone (docs/files-and-errors.md says so); no
    write of the workflow's own is among those that broke: its lines go to stderr."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(workdir),
                             "-n"], cwd=workdir, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # (as head does after its line)
    writers, last = [], None  # the frame of each write that broke: the last one before the error
    for line in proc.communicate(timeout=300)[1].splitlines():
        if line.strip().startswith("File "):
            last = line
        elif line.startswith("BrokenPipeError"):
            writers.append(last)
    assert writers, "Snakemake exits quietly on a closed stdout now: drop the note in docs/files-and-errors.md"
    assert all("site-packages/snakemake/" in str(w) for w in writers), writers


def _resolved_configs(workdir: Path) -> list[Path]:
    return sorted((workdir / "results" / "config").glob("resolved-*.yaml"))


def resolve(snakemake, workdir: Path, *args: str) -> dict | None:
    """Run the `resolved_config` rule with these arguments; the resolved config it wrote, read
    (None: it wrote none, as the file of these very settings was there already)."""
    before = set(_resolved_configs(workdir)) if (workdir / "results" / "config").is_dir() else set()
    proc = snakemake(workdir, "--cores", "1", "resolved_config", *args)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    new = set(_resolved_configs(workdir)) - before
    assert len(new) <= 1, new
    return yaml.safe_load(new.pop().read_text()) if new else None


def test_resolved_config_has_defaults_and_is_named_by_its_content(snakemake, workdir):
    resolved = resolve(snakemake, workdir)
    assert resolved["profile"] == "tiny"
    assert resolved["report"] == {"measured_gpu": "h200", "dpi": 150,  # schema defaults filled
                                  "quality_sizes": ["small", "medium", "large"]}
    (first,) = _resolved_configs(workdir)
    mtime = first.stat().st_mtime_ns
    umask = os.umask(0)
    os.umask(umask)
    assert first.stat().st_mode & 0o777 == 0o666 & ~umask  # readable as the other outputs are
    # same settings: the same file (the run's target, named by its content, is the one there),
    # left alone
    assert resolve(snakemake, workdir) is None
    assert first.stat().st_mtime_ns == mtime and _resolved_configs(workdir) == [first]
    # other settings: another file; the first (which running jobs may read) is never touched
    assert resolve(snakemake, workdir, "--config", "report={'dpi': 100}")["report"]["dpi"] == 100
    assert len(_resolved_configs(workdir)) == 2 and first.stat().st_mtime_ns == mtime


def test_config_overrides_are_typed_as_a_config_file_would_be(snakemake, workdir):
    """Snakemake hands nested --config values over as strings (YAML's BaseLoader, no quotes
    kept): numbers become numbers again, inside lists and their mappings too, while a key that
    takes text keeps the text as written -- a quoted "0123" is a name, not YAML's octal 83."""
    resolved = resolve(snakemake, workdir, "--config", 'data={tokenizer: "0123"}', "report={dpi: '100'}",
                       "pretrain={sizes: {tiny: {extra_seeds: [{steps: 300, seeds: [5]}]}}}")
    assert resolved["data"]["tokenizer"] == "0123"
    assert resolved["report"]["dpi"] == 100
    assert resolved["pretrain"]["sizes"]["tiny"]["extra_seeds"] == [{"steps": 300, "seeds": [5]}]


@pytest.mark.parametrize("override, message", [
    ("bogus=1", "unknown key bogus"),
    ("analysis={'colour': 1}", "unknown key analysis.colour"),
    ("analysis={'loading_trials': 'many'}", "analysis.loading_trials: 'many' is not of type 'integer'"),
    ("profile=huge", "profile: 'huge' is not one of"),
])
def test_bad_config_names_the_key_before_any_job(snakemake, workdir, override, message):
    proc = snakemake(workdir, "--cores", "1", "--config", override)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not (workdir / "logs").exists()  # nothing ran


def test_out_of_range_value_names_the_key(snakemake, workdir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("analysis:\n  loading_tokens: [0, 4]\n")
    proc = snakemake(workdir, "--cores", "1", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "analysis.loading_tokens.0: 0 is less than the minimum of 1" in proc.stderr


def _planned(proc) -> dict[str, int]:
    text = proc.stdout + proc.stderr
    return _job_counts(text) if "Job stats:" in text else {}


def test_params_trigger_reruns_exactly_the_rules_whose_section_changed(snakemake, workdir):
    targets = ["results/analysis/table1.csv", "results/analysis/loading.csv"]
    fast = ["--config", "analysis={'loading_tokens': [1, 8], 'loading_trials': 2}"]
    proc = snakemake(workdir, "--cores", "2", *targets, *fast)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "logs" / "analysis" / "loading.log").exists()
    # (--config takes several values: targets go before it)
    # a second run does nothing
    assert _planned(snakemake(workdir, "-n", "--cores", "2", *targets, *fast)) == {}
    # another section changed: still nothing to do for these rules
    other = snakemake(workdir, "-n", "--cores", "2", *targets, *fast,
                      "report={'dpi': 100}")
    assert _planned(other) == {}
    # their own section changed: both rerun (their params hold the analysis section)
    changed = ["--config", "analysis={'loading_tokens': [1, 8], 'loading_trials': 3}"]
    assert _planned(snakemake(workdir, "-n", "--cores", "2", *targets, *changed)) == {
        "table1": 1, "loading": 1}
    # rerunning one rule on request
    forced = snakemake(workdir, "-n", "--cores", "2", *targets, "--forcerun", "loading", *fast)
    assert _planned(forced) == {"loading": 1}


def _given(resolved, value) -> bool:
    """`value` reached the resolved config (which adds schema defaults inside nested mappings)."""
    if isinstance(value, dict) and isinstance(resolved, dict):
        return all(k in resolved and _given(resolved[k], v) for k, v in value.items())
    return resolved == value


def _gpu_corpus(workdir) -> bool:
    corpus = workdir.parent / "shared" / "data" / "corpus"
    return (corpus / "gutenberg").is_dir() and (corpus / "gutenberg-more").is_dir()


@pytest.mark.parametrize("profile, name", [("gpu", "gpu"), ("slurm", "paper")])
def test_profiles_plan_the_whole_dag_with_valid_numbers(snakemake, workdir, profile, name):
    folder = workdir / "workflow" / "profiles" / profile
    if profile == "gpu" and not _gpu_corpus(workdir):
        pytest.skip("the gpu profile's data.files names ../shared/data/corpus/gutenberg{,-more}, the 285 MB corpus the "
                    "build machines keep beside the checkout (too large to ship; a clone lacks it)")
    proc = snakemake(workdir, "-n", "--workflow-profile", str(folder))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "report" in _job_counts(proc.stdout + proc.stderr)
    resolved = resolve(snakemake, workdir, "--workflow-profile", str(folder), "--executor", "local")
    assert resolved["profile"] == name
    # every number of the profile's config files reached the commands' config
    settings = yaml.safe_load((folder / "config.yaml").read_text())
    for path in settings["configfile"]:
        for section, values in (yaml.safe_load((workdir / path).read_text()) or {}).items():
            if isinstance(values, dict):
                for key, value in values.items():
                    assert _given(resolved[section][key], value), (path, section, key)
            else:
                assert resolved[section] == values, (path, section)


@pytest.mark.parametrize("target, jobs", [
    # the size's own 1k steps (evaluated) and its tokens axis: 2k, 4k, 8k, 12k steps, and
    # twenty-four more seeds at 8k (extra_seeds)
    ("quality_small", {"data": 1, "train": 78, "eval": 6, "quality": 1, "quality_length": 4, "quality_small": 1}),
    # 1k, 4k, 8k and 16k steps, two seeds of two models, and four more seeds at 8k and two at 16k
    # (extra_seeds)
    ("quality_medium", {"data": 1, "train": 28, "eval": 4, "quality": 1, "quality_length": 3, "quality_medium": 1}),
    ("quality_large", {"data": 1, "train": 4, "eval": 4, "quality": 1, "quality_large": 1}),
    # its baselines are the small pair's runs: trained (and evaluated) under their names; the same
    # twenty-four extra seeds at 8k
    ("quality_smallrms", {"data": 1, "train": 78, "eval": 6, "quality": 1, "quality_length": 4,
                          "quality_smallrms": 1}),
    # one length of the axis (three seeds and twenty-four extra, of two models)
    ("results/quality/small/8000steps/runs.csv", {"data": 1, "train": 54, "quality_length": 1}),
    ("ablation_seeds", {"data": 1, "train": 12, "ablation": 1, "ablation_seeds": 1}),
])
def test_gpu_profile_targets_are_one_size_each(snakemake, workdir, target, jobs):
    folder = workdir / "workflow" / "profiles" / "gpu"
    if not _gpu_corpus(workdir):
        pytest.skip("the gpu profile's data.files names ../shared/data/corpus/gutenberg{,-more}, the 285 MB corpus the "
                    "build machines keep beside the checkout (too large to ship; a clone lacks it)")
    proc = snakemake(workdir, "-n", "-p", "--workflow-profile", str(folder), target)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert _job_counts(out) == jobs
    # seed 0 of each pair gets the downstream tasks (eval.seeds), the other seeds perplexity only
    evals = [line for line in out.splitlines() if " eval --config" in line]
    assert len([e for e in evals if "--perplexity-only" not in e]) == (2 if jobs.get("eval") else 0)
    if target == "quality_smallrms":
        assert "pretrain-smallrms-baseline" not in out and "pretrain-small-baseline-s2-12000steps" in out
    # small runs share the GPU: 12 slots / runs_per_gpu
    slots = {"quality_medium": 2, "quality_large": 6}.get(target, 1)
    assert f"gpu_slots={slots}" in out


def test_bad_ladder_size_stops_before_any_job(snakemake, workdir):
    proc = snakemake(workdir, "--cores", "1", "--config",
                     "pretrain={'sizes': {'a': {'deamoe': {'h_ffn': 24, 'n_dept': 8}}}}")
    assert proc.returncode != 0
    assert "config: pretrain.sizes.a.deamoe: missing key n_expert" in proc.stderr
    assert not (workdir / "logs").exists()


def test_missing_corpus_file_is_named_before_any_job(snakemake, workdir, tmp_path):
    cfg = tmp_path / "files.yaml"
    cfg.write_text(f"data:\n  source: files\n  files: ['{tmp_path}/nowhere/*.txt']\n")
    proc = snakemake(workdir, "-n", "--cores", "1", "--configfile", str(cfg))
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "data.files" in out and "nowhere/*.txt' matches no file" in out


def test_kill_then_rerun_incomplete_finishes_the_job(snakemake, workdir):
    """Snakemake killed mid-job (whole process group, like a lost terminal): the next run redoes
    the interrupted job and nothing half-written is taken for a result."""
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[2]

    target = "results/analysis/loading.csv"
    slow = ["--config", "analysis={'loading_tokens': [1, 64, 512], 'loading_trials': 4000}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(workdir),
         "--cores", "1", target, *slow],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = workdir / "logs" / "analysis" / "loading.log"
    deadline = time.time() + 120
    while not (log.exists() and log.stat().st_size > 0) and time.time() < deadline:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (workdir / target).exists()  # atomic writes: no partial CSV
    fast = ["--config", "analysis={'loading_tokens': [1, 8], 'loading_trials': 2}"]
    # a hard kill leaves Snakemake's lock behind: the README's recovery is --unlock first
    locked = snakemake(workdir, "--cores", "1", target, *fast)
    assert locked.returncode != 0 and "cannot be locked" in locked.stderr
    assert snakemake(workdir, "--unlock", target, *fast).returncode == 0
    again = snakemake(workdir, "--cores", "1", "--rerun-incomplete", target, *fast)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (workdir / target).exists()
    assert _planned(snakemake(workdir, "-n", "--cores", "1", target, *fast)) == {}
