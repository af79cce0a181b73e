"""What a user sees when the workflow refuses: a bad config, or a file or folder it names, is the
`config: ...` lines alone (no Snakemake traceback or banner), before any job runs."""

from __future__ import annotations

import pytest


def _errors(proc) -> list[str]:
    """stderr without Snakemake's one informational line about --config."""
    return [line for line in proc.stderr.splitlines()
            if line.strip() and not line.startswith("Config file config.yaml is extended")]


@pytest.mark.parametrize("override, line", [
    ("train={'lr': 'abc'}", "config: train.lr: 'abc' is not of type 'number'"),
    ("foo=1", "config: unknown key foo (allowed: "),
    ("pretrain={'sizes': {'a': {'deamoe': {'h_ffn': 24, 'n_dept': 8}}}}",
     "config: pretrain.sizes.a.deamoe: missing key n_expert"),
    # 12 gpu_slots // 7 is one slot: twelve runs would share the GPU, not seven
    ("pretrain={'sizes': {'tiny': {'runs_per_gpu': 7}}}",
     "config: pretrain.sizes.tiny.runs_per_gpu: 7 is not one of [1, 2, 3, 4, 6, 12]"),
    # a file or folder the config names, checked against the disk
    ("data={'source': 'files', 'files': ['nowhere/*.txt']}",
     "config: data.files entry 'nowhere/*.txt' matches no file"),
    ("data={'source': 'files', 'files': ['data']}",
     "config: data.files entry 'data' matches no regular file (only a folder"),
    ("eval={'data_dir': 'nowhere'}", "config: eval.data_dir 'nowhere' is not a folder (no such path)"),
    ("eval={'data_dir': 'config.yaml'}", "config: eval.data_dir 'config.yaml' is not a folder (a file)"),
    ("eval={'data_dir': 'data', 'tasks': ['ptb', 'boolq']}",
     "config: eval.data_dir 'data' lacks boolq.jsonl.gz, ptb_test.txt.gz"),
])
def test_a_bad_config_is_its_lines_alone_before_any_job(snakemake, workdir, override, line):
    proc = snakemake(workdir, "-n", "--cores", "1", "--config", override)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert _errors(proc) == [_errors(proc)[0]] and _errors(proc)[0].startswith(line), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "File \"" not in proc.stderr
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


@pytest.mark.parametrize("override, line", [
    ("ablation={size: ''}", None),  # documented: '' = the first size
    ("microbench={prior_picks: ''}", None),  # documented: '' = no earlier picks
    ("eval={hf_home: ''}", "config: eval.hf_home: '' should be non-empty"),
    ("ablation={variants: [no1, '']}", "config: ablation.variants.1: '' is not one of"),
])
def test_an_empty_string_on_the_command_line_stays_a_string(snakemake, workdir, override, line):
    """Snakemake hands a nested --config value over as text, `''` as an empty one; read again as
    YAML it was null, so a documented '' was refused as "None is not of type 'string'"."""
    proc = snakemake(workdir, "-n", "--cores", "1", "--config", override)
    assert proc.returncode == (1 if line else 0), proc.stderr[-2000:]
    assert (_errors(proc)[:1] == [] if line is None else _errors(proc)[0].startswith(line)), proc.stderr


def test_every_conflict_is_a_line_and_nothing_else(snakemake, workdir):
    proc = snakemake(workdir, "--cores", "1", "--config", "model={'num_attention_heads': 5}",
                     "train={'micro_batch_size': 3}")
    assert proc.returncode == 1
    assert all(line.startswith("config: ") for line in _errors(proc)) and len(_errors(proc)) >= 3, proc.stderr
    assert not (workdir / "logs").exists()


def test_a_damaged_resolved_config_is_written_again_before_the_jobs_read_it(snakemake, workdir):
    """results/config/resolved-<hash>.yaml is named by its content: one edited or cut short since it
    was written is replaced by that content, not handed to every job."""
    assert snakemake(workdir, "--cores", "1", "resolved_config").returncode == 0
    (resolved,) = (workdir / "results" / "config").glob("resolved-*.yaml")
    good = resolved.read_text()
    resolved.write_text(good[: len(good) // 2] + "\ntrain: [broken\n")
    proc = snakemake(workdir, "--cores", "1", "results/analysis/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert resolved.read_text() == good and (workdir / "results" / "analysis" / "table1.csv").is_file()


def _refusals(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("refused before any job: ")]


@pytest.mark.parametrize("where, target, named", [
    # Snakemake deletes a job's outputs and log before running it: a user's file there is named,
    # nothing runs, and the file stays as it was
    ("results/data/meta.json", "results/data/train.bin", "results/data/meta.json exists and was not written"),
    ("logs/analysis/table1.log", "results/analysis/table1.csv",
     "logs/analysis/table1.log exists and was not written by this workflow (rule table1's log)"),
    # the vLLM server's log, which the serve command writes beside the job's own: named before the
    # data stage and the training, not by the serve job after them
    ("logs/serve/deamoe.server.log", "results/serve/deamoe",
     "logs/serve/deamoe.server.log exists and was not written by this workflow (rule serve's log)"),
    # a run's resume state, beside its declared outputs: named before the data stage runs, not
    # by the train job after it
    ("results/train/ablation-no1-s0/state/resume.pt", "results/train/ablation-no1-s0/summary.json",
     "results/train/ablation-no1-s0/state/resume.pt exists and was not written by deamoe"),
    # a file in the folder a job's command writes into (--out): named before any job, not by the
    # data job's command once it ran (or by eval-tables' after the training)
    ("results/data/notes.txt", "results/data/train.bin",
     "results/data holds files deamoe did not write (e.g. results/data/notes.txt"),
])
def test_a_users_file_where_a_job_writes_is_refused_and_kept(snakemake, workdir, where, target, named):
    mine = workdir / where
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"my own notes\n")
    proc = snakemake(workdir, "--cores", "1", target)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = _refusals(proc)
    assert named in line and "Traceback" not in proc.stderr
    assert mine.read_bytes() == b"my own notes\n"
    assert not (workdir / target).exists()


def test_a_users_file_inside_an_output_folder_is_refused_and_kept(snakemake, workdir):
    assert snakemake(workdir, "--cores", "1", "results/microbench").returncode == 0
    mine = workdir / "results" / "microbench" / "notes.txt"
    mine.write_text("mine\n")
    proc = snakemake(workdir, "--cores", "1", "--forcerun", "microbench", "--", "results/microbench")
    assert proc.returncode == 1
    (line,) = _refusals(proc)
    assert "results/microbench holds results/microbench/notes.txt, not written by this workflow" in line
    assert mine.read_text() == "mine\n"


@pytest.mark.parametrize("dry", [["-n"], []])
def test_delete_all_output_refuses_while_a_users_file_is_at_an_output(snakemake, workdir, dry):
    """Snakemake's --delete-all-output deletes every existing output path (no onstart runs): a
    user's file there is named and nothing is deleted; the workflow's own outputs still go."""
    assert snakemake(workdir, "--cores", "1", "results/analysis/table1.csv").returncode == 0
    ours, mine = workdir / "results" / "analysis" / "table1.csv", workdir / "results" / "analysis" / "loading.csv"
    mine.write_text("my own notes\n")
    proc = snakemake(workdir, "--delete-all-output", *dry)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("refused, nothing deleted: ")]
    assert "results/analysis/loading.csv exists and was not written by deamoe" in line
    assert "Traceback" not in proc.stderr and mine.read_text() == "my own notes\n" and ours.is_file()
    mine.unlink()
    proc = snakemake(workdir, "--delete-all-output", *dry)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ours.is_file() == bool(dry)
    if not dry:  # what it deleted is no longer named as the workflow's: a user's file there is kept
        ours.write_text("my own table\n")
        proc = snakemake(workdir, "--cores", "1", "--forcerun", "table1", "--", "results/analysis/table1.csv")
        assert proc.returncode == 1 and len(_refusals(proc)) == 1, proc.stderr[-3000:]
        assert ours.read_text() == "my own table\n"


@pytest.mark.parametrize("args", [["--workflow-profile", "workflow/profiles/gpus"],
                                  ["--workflow-profile=workflow/profiles/gpus"]])
def test_a_misspelled_workflow_profile_is_one_line_not_the_tiny_pipeline(snakemake, workdir, args):
    """Snakemake drops a --workflow-profile that names no folder without a word: the run would be
    the tiny CPU pipeline instead of the scale asked for."""
    proc = snakemake(workdir, "-n", *args)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert _errors(proc) == ["profile: --workflow-profile workflow/profiles/gpus: no such profile folder "
                             "(this workflow's: workflow/profiles/gpu, workflow/profiles/slurm)"], proc.stderr
    # (the shipped text: a clone away from the build machines lacks the profile's ../shared corpus)
    assert snakemake(workdir, "-n", "--workflow-profile", "workflow/profiles/gpu",
                     "--config", "data={'source': 'bundled', 'files': []}").returncode == 0


def test_a_configfile_beside_a_profile_keeps_its_scale_or_is_one_line(snakemake, workdir):
    """A --configfile on the command line replaces the profile's configfile list: without the
    profile's own files the run would be the tiny pipeline on the GPU profile's resources."""
    # (the shipped text: a clone away from the build machines lacks the profile's ../shared corpus)
    (workdir / "my.yaml").write_text("train: {lr: 0.001}\ndata: {source: bundled, files: []}\n")
    proc = snakemake(workdir, "-n", "--workflow-profile", "workflow/profiles/gpu", "--configfile", "my.yaml")
    assert proc.returncode == 1, proc.stdout[-2000:]
    files = "workflow/profiles/gpu/pipeline.yaml workflow/profiles/gpu/train-sections.yaml"
    assert [x for x in _errors(proc) if not x.startswith("Using workflow specific profile")] == [
        "config: --configfile replaces the configfile list of the profile "
        "workflow/profiles/gpu, dropping its scale (workflow/profiles/gpu/pipeline.yaml, "
        f"workflow/profiles/gpu/train-sections.yaml); name its files first: --configfile {files} my.yaml "
        "(or set `profile:` in yours: a scale of its own)"], proc.stderr
    proc = snakemake(workdir, "-n", "--workflow-profile", "workflow/profiles/gpu", "--configfile",
                     *files.split(), "my.yaml", "--", "resolved_config")
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("args, flag", [
    (["--config", "train={'steps': 5}", "--config", "eval={'limit': 2}"], "--config"),
    (["-C", "train={'steps': 5}", "--config=eval={'limit': 2}"], "--config"),
    (["--configfile", "a.yaml", "--configfiles", "b.yaml"], "--configfile"),
])
def test_a_config_option_given_twice_is_one_line_not_half_the_settings(snakemake, workdir, args, flag):
    """Snakemake keeps the last --config (or --configfile) and drops the earlier ones' values
    without a word: the run would train 300 steps after `--config train=... --config eval=...`."""
    for name in ("a.yaml", "b.yaml"):
        (workdir / name).write_text("train: {steps: 5, warmup_steps: 1}\n")
    proc = snakemake(workdir, "-n", *args)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert _errors(proc) == [f"config: {flag} is given twice; Snakemake would keep only the last one's "
                             f"values: give them all after one {flag} ({flag} A B ...)"], proc.stderr
    assert snakemake(workdir, "-n", "--configfile", "a.yaml", "b.yaml").returncode == 0


def test_the_workflows_own_outputs_and_logs_are_rewritten(snakemake, workdir):
    target = "results/analysis/table1.csv"
    assert snakemake(workdir, "--cores", "1", target).returncode == 0
    proc = snakemake(workdir, "--cores", "1", "--forcerun", "table1", "--", target)
    assert proc.returncode == 0 and not _refusals(proc), proc.stderr[-3000:]
    assert "table1.log" in (workdir / "logs" / "analysis" / ".deamoe-output").read_text().split()


@pytest.mark.parametrize("text, line", [
    ("train: [\n", "config: config.yaml cannot be parsed: while parsing a flow node (line 2, column 1)"),
    ("", "config: config.yaml must be a mapping of sections (profile, analysis, data, ...); it is empty"),
    ("train:\n  steps: 5\ntrain:\n  lr: 0.1\n", "config: config.yaml:3: key 'train' is given twice"),
])
def test_a_broken_config_yaml_is_one_line_naming_it(snakemake, workdir, text, line):
    (workdir / "config.yaml").unlink()  # a link to the checkout's: this test's own copy instead
    (workdir / "config.yaml").write_text(text)
    proc = snakemake(workdir, "-n", "--cores", "1")
    assert proc.returncode == 1
    assert _errors(proc) == [_errors(proc)[0]] and _errors(proc)[0].startswith(line), proc.stderr


@pytest.mark.parametrize("target, line", [
    ("results/quality/big/runs.csv", "target: size=big: unknown size 'big'; pretrain.sizes has tiny"),
    ("results/quality/tiny/100steps/runs.csv", "target: size=tiny, steps=100: size tiny has no length of 100"),
    ("results/eval/pretrain-big-deamoe-s0/lm_eval.json", "target: run=pretrain-big-deamoe-s0: unknown size 'big'"),
    ("results/train/pretrain-tiny-deamoe-s9/summary.json",
     "target: run=pretrain-tiny-deamoe-s9: run pretrain-tiny-deamoe-s9: seed 9 is not among the seeds"),
    ("results/train/ablation-no1-s9/summary.json",
     "target: run=ablation-no1-s9: run ablation-no1-s9: seed 9 is not among the ablation's seeds"),
])
def test_a_target_the_config_does_not_define_is_one_line_before_any_job(snakemake, workdir, target, line):
    """A size, length or seed no section defines: named while the DAG is built, not as an input
    function's traceback, nor by the train job after the data stage ran."""
    dry = snakemake(workdir, "-n", "--cores", "1", target)
    assert dry.returncode == 1, dry.stderr[-3000:]
    assert _errors(dry) == [_errors(dry)[0]] and _errors(dry)[0].startswith(line), dry.stderr
    proc = snakemake(workdir, "--cores", "1", target)  # after Snakemake's banner, the line alone
    assert proc.returncode == 1 and _errors(proc)[-1] == _errors(dry)[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr and "Exception" not in proc.stderr
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


@pytest.mark.parametrize("args, line", [
    (["results/analysis/table.csv"], "target: results/analysis/table.csv: no rule is named so or writes it"),
    (["-R", "tabel1"], "target: --forcerun tabel1: no rule is named so or writes it"),
    (["--until", "results/analysis"], "target: --until results/analysis: no rule is named so or writes it"),
    # tab-completed: Snakemake matches no output by an absolute path
    (["{workdir}/results/analysis/table1.csv"], "target: {workdir}/results/analysis/table1.csv: Snakemake "
     "matches outputs by their relative path; give results/analysis/table1.csv"),
    # an unset shell variable (`snakemake "$TARGET"`): was a ValueError from os.path.relpath
    ([""], "target: '': an empty target; give a rule's name or a path a rule writes"),
    (["--forcerun", "", "--", "all"], "target: --forcerun '': an empty target"),
])
def test_a_target_that_no_rule_writes_is_one_line_before_any_job(snakemake, workdir, args, line):
    """Snakemake's own "MissingRuleException: No rule to produce X (if you use input functions
    make sure that they don't raise unexpected exceptions)" sent the user to input functions."""
    proc = snakemake(workdir, "-n", "--cores", "1", *[a.format(workdir=workdir) for a in args])
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert _errors(proc) == [_errors(proc)[0]] and _errors(proc)[0].startswith(line.format(workdir=workdir)), \
        proc.stderr
    assert "Exception" not in proc.stdout + proc.stderr
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()
    assert snakemake(workdir, "-n", "--cores", "1", "./results/analysis/table1.csv").returncode == 0


@pytest.mark.parametrize("mine, named", [
    ("logs", "logs is a file where the folder of logs/analysis/table1.log (rule table1's log) goes"),
    ("results/config", "results/config is a file where the folder of results/config/resolved-"),
])
def test_a_users_file_where_the_workflow_makes_a_folder_is_refused_and_kept(snakemake, workdir, mine, named):
    """Not the log or resolved config itself but a folder above it: refused in one line before any
    job (not a NotADirectoryError from the start hook), the file as it was."""
    path = workdir / mine
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"my own notes\n")
    proc = snakemake(workdir, "--cores", "1", "results/analysis/table1.csv")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = _refusals(proc)
    assert named in line and "Traceback" not in proc.stderr and "Error in file" not in proc.stderr, proc.stderr
    assert path.read_bytes() == b"my own notes\n"
    assert not (workdir / "results" / "analysis").exists()


def test_a_resolved_config_folder_that_cannot_be_made_is_one_line(snakemake, workdir):
    """results/config a link to a folder since removed: the start hook's mkdir raised, printed
    with the Snakefile's stack, before any job."""
    (workdir / "results").mkdir()
    (workdir / "results" / "config").symlink_to(workdir / "gone")
    proc = snakemake(workdir, "--cores", "1", "results/analysis/table1.csv")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = _refusals(proc)
    assert line.startswith("refused before any job: results/config (a link to nothing): cannot make this folder")
    assert "File \"" not in proc.stderr and not (workdir / "results" / "analysis").exists()


@pytest.mark.parametrize("link, named", [
    ("logs/analysis", "logs/analysis/table1.log: cannot name it in its folder's .deamoe-output (File exists"),
    ("logs/analysis/.deamoe-output", "logs/analysis/.deamoe-output is a link: not deamoe's record"),
])
def test_a_log_folder_the_workflow_cannot_record_in_is_one_line(snakemake, workdir, link, named):
    """A link to nothing where a log's folder or its marker goes: the start hook's OSError or
    OutputPathError was printed with the Snakefile's stack."""
    (workdir / link).parent.mkdir(parents=True, exist_ok=True)
    (workdir / link).symlink_to(workdir / "gone")
    proc = snakemake(workdir, "--cores", "1", "results/analysis/table1.csv")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = _refusals(proc)
    assert named in line and "File \"" not in proc.stderr, proc.stderr
    assert not (workdir / "results" / "analysis").exists()


def test_a_users_file_added_to_a_folder_written_as_a_whole_is_refused_and_kept(snakemake, workdir):
    """results/data/tokenizer (a directory output, written as a whole): its marker lists what it
    held, so a file added since is the user's -- named before any job, not deleted with the
    folder when the rule runs again."""
    reduced = str(workdir / "tests" / "workflow" / "reduced.yaml")
    assert snakemake(workdir, "--cores", "1", "--configfile", reduced, "--", "results/data/meta.json").returncode == 0
    mine = workdir / "results" / "data" / "tokenizer" / "notes.txt"
    mine.write_bytes(b"my own notes\n")
    proc = snakemake(workdir, "--cores", "1", "--configfile", reduced, "--forcerun", "data", "--",
                     "results/data/meta.json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = _refusals(proc)
    assert "results/data/tokenizer holds results/data/tokenizer/notes.txt, not written by this workflow" in line
    assert mine.read_bytes() == b"my own notes\n"


def test_the_html_report_before_the_report_rule_ran_shows_what_there_is(snakemake, workdir):
    """`snakemake --report` with no table or figure written yet: the report is built (its front
    page), not stopped by Snakemake at the first missing file."""
    proc = snakemake(workdir, "--report", str(workdir / "report.html"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (workdir / "report.html").stat().st_size > 0
    assert "marked for report but does not exist" not in proc.stderr


def test_a_moved_checkout_keeps_its_results(snakemake, workdir):
    """The inputs' paths are the checkout's own (relative): a checkout moved or copied elsewhere
    has nothing to redo (the bundled corpus's absolute path made every stage run again)."""
    # the checkout's own Snakefile, as a user runs it there (not the repository's by its path)
    assert snakemake(workdir, "-s", "Snakefile", "--cores", "1", "results/data/meta.json").returncode == 0
    moved = workdir.rename(workdir.with_name("moved"))
    proc = snakemake(moved, "-s", "Snakefile", "-n", "--cores", "1", "results/data/meta.json")
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-2000:]


@pytest.mark.parametrize("where, line", [
    # Snakemake's reporter opened the path as it was: the user's file was replaced without a word
    ("mine.html", "report: mine.html exists and was not written by deamoe"),
    # a FileNotFoundError / IsADirectoryError traceback from the reporter
    ("folder.html", "report: folder.html is a directory; give a file path for this output"),
])
def test_a_report_path_holding_the_users_own_is_one_line_and_kept(snakemake, workdir, where, line):
    mine = workdir / where
    mine.mkdir() if where == "folder.html" else mine.write_text("my own page\n")
    proc = snakemake(workdir, "--report", where)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _errors(proc) == [_errors(proc)[0]] and _errors(proc)[0].startswith(line), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert mine.is_dir() if where == "folder.html" else mine.read_text() == "my own page\n"


def test_a_report_goes_into_a_new_folder_and_is_replaced_by_the_next(snakemake, workdir):
    """The report's folder is made (was a FileNotFoundError traceback); a report the workflow
    wrote is its own to replace, and nothing but the report is left beside it."""
    for _ in range(2):
        proc = snakemake(workdir, "--report", "new/sub/report.html")
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (workdir / "new" / "sub").iterdir()) == [".deamoe-output", "report.html"]
