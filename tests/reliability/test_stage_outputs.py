"""The stage commands' outputs and flags: a folder inside an output folder is checked like the
folder itself, an output never lies in an input, a file output is never written as a folder's
(`x/`), a cache folder where a file is is named before any work, the model named in the results
is one of the ladder's, and a list flag gives each point once."""

from __future__ import annotations

import shutil

import pytest

from cli_battery import run_cli, train_config, write_config

TRAIN = ["train", "--config", "c.yaml", "--run", "pretrain-t-deamoe-s0", "--data", "d", "--out"]
REPORT = ["report", "--config", "c.yaml", "--results", "res", "--measured", "meas", "--out"]


def _owned(folder):
    """A folder deamoe wrote into before (its marker naming nothing yet)."""
    folder.mkdir(parents=True)
    (folder / ".deamoe-output").write_text("written by python -m deamoe: the files named below\n")
    return folder


@pytest.fixture
def report_inputs(work):
    write_config(work / "c.yaml")
    (work / "res").mkdir()
    (work / "meas").mkdir()
    return work


def test_a_folder_of_user_files_where_train_keeps_its_resume_state_is_refused(work, failing, shards):
    train_config(work / "c.yaml", shards)
    (work / "d").symlink_to(shards / "data")
    (_owned(work / "run") / "state").mkdir()
    (work / "run" / "state" / "notes.txt").write_text("precious")
    failing([*TRAIN, "run"], "run/state", "notes.txt", "did not write")


@pytest.mark.parametrize("sub", ["tables", "figures"])
def test_a_folder_of_user_files_where_report_writes_tables_or_figures_is_refused(report_inputs, failing, sub):
    (report_inputs / "rep" / sub).mkdir(parents=True)
    (report_inputs / "rep" / sub / "mine.md").write_text("precious")
    failing([*REPORT, "rep"], f"rep/{sub}", "mine.md", "did not write")


def test_a_link_where_report_writes_its_tables_is_refused_before_any_work(report_inputs, failing):
    _owned(report_inputs / "rep")
    (report_inputs / "rep" / "tables").symlink_to(report_inputs / "nowhere")
    failing([*REPORT, "rep"], "rep/tables", "is a link")


@pytest.mark.parametrize("out, names", [
    ("res", ["--out res is --results res"]),
    ("meas/h200", ["--out meas/h200 lies inside --measured meas"]),
])
def test_the_report_is_not_written_into_what_it_reads(report_inputs, failing, out, names):
    failing([*REPORT, out], *names)


@pytest.mark.parametrize("out, names", [
    ("d", ["--out d is --data d"]), ("d/run", ["--out d/run lies inside --data d"]),
])
def test_a_run_folder_is_not_the_token_shards_folder(work, failing, shards, out, names):
    train_config(work / "c.yaml", shards)
    shutil.copytree(shards / "data", work / "d")
    failing([*TRAIN, out], *names)


@pytest.mark.parametrize("argv", [
    ["table1", "--out", "t/"],
    ["loading", "--out", "l/."],
    ["pretrain", "--config", "c.yaml", "--runs", "r", "--out", "q/"],
    ["ablation", "--config", "c.yaml", "--runs", "r", "--out", "runs/.."],
    ["serve", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "sv", "--log", "logs/"],
], ids=lambda a: a[0])
def test_a_file_output_written_as_a_folder_is_refused(work, failing, argv):
    flag = "--log" if "--log" in argv else "--out"
    failing(argv, f"argument {flag}", "must be a file path", repr(argv[argv.index(flag) + 1]))
    assert not any(work.iterdir())


@pytest.mark.parametrize("command", ["eval", "serve"])
@pytest.mark.parametrize("model", ["", "deamoe-s0", "Baseline"])
def test_the_model_named_in_the_results_is_the_ladders(work, failing, command, model):
    failing([command, "--config", "c.yaml", "--checkpoint", "ck", "--model", model, "--out", "o"],
            "argument --model", "invalid choice", "'baseline', 'deamoe'")


@pytest.mark.parametrize("command", ["eval", "serve"])
def test_a_checkpoint_of_the_other_model_is_refused_before_any_work(work, failing, checkpoint, command):
    """A DeaMoE checkpoint evaluated or served as `--model baseline` filled the baseline's rows of
    Tables 2-3 or Figure 3 with DeaMoE's numbers, without a word."""
    write_config(work / "c.yaml")
    failing([command, "--config", "c.yaml", "--checkpoint", checkpoint, "--model", "baseline", "--out", "o"],
            "--model baseline", f"{checkpoint}/config.json", "ffn_type='deamoe'", "give --model deamoe")


@pytest.mark.parametrize("command", ["eval", "serve"])
def test_a_training_runs_folder_given_as_the_checkpoint_names_the_checkpoint_inside(
        work, failing, checkpoint, command):
    """serve said only that the folder had no config.json; both commands now name the run's
    checkpoint one level down, before any work."""
    write_config(work / "c.yaml")
    run = checkpoint.parent
    failing([command, "--config", "c.yaml", "--checkpoint", str(run), "--model", "deamoe", "--out", "o"],
            f"{run}: not a checkpoint directory", f"the run's checkpoint is {checkpoint}")
    assert not (work / "o").exists()


def test_a_file_where_the_evaluation_cache_goes_is_named_before_any_work(work, failing, checkpoint):
    write_config(work / "c.yaml", eval={"hf_home": "cache/hf"})
    (work / "cache").write_text("mine")
    failing(["eval", "--config", "c.yaml", "--checkpoint", str(checkpoint), "--model", "deamoe", "--out", "e"],
            "eval.hf_home=cache/hf", "a file is where")


@pytest.mark.parametrize("argv, names", [
    (["table1", "--models", "DeepSeek-V3,Kimi-K2,DeepSeek-V3", "--out", "t.csv"], ["argument --models", "DeepSeek-V3 twice"]),
    (["loading", "--tokens", "4,8,4", "--out", "l.csv"], ["argument --tokens", "4 twice"]),
], ids=["table1", "loading"])
def test_a_point_given_twice_on_the_command_line_is_refused(work, failing, argv, names):
    failing(argv, *names)  # the config's lists are distinct (the schema's uniqueItems): so are the flags'


def test_a_user_file_put_in_a_folder_written_as_a_whole_stops_its_replacement(work, failing, shards, capsys):
    from deamoe.ownership import foreign_entries

    train_config(work / "c.yaml", shards)
    assert run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)[0] == 0
    (work / "d" / "tokenizer" / "notes.txt").write_text("precious")
    assert foreign_entries(work / "d" / "tokenizer") == [work / "d" / "tokenizer" / "notes.txt"]
    failing(["data", "--config", "c.yaml", "--out", "d"], "d/tokenizer/notes.txt", "did not write")
    (work / "d" / "tokenizer" / "notes.txt").unlink()
    assert run_cli(["data", "--config", "c.yaml", "--out", "d"], capsys)[0] == 0  # its own: replaced
