"""The GPU scripts' argument handling, run on the CPU: a bad environment variable is one line
and a nonzero exit before any work, a file of the user's where a script writes its log or its
archives is refused and left as it was, and a failing command is the script's exit status.
(`sh`, the scripts' runner: conftest.py.)"""

from __future__ import annotations

import sys

import pytest

from cli_battery import assert_one_line_failure, tree


@pytest.mark.parametrize("env, names", [
    ({"DEAMOE_GIT_SHA": "HEAD"}, ["DEAMOE_GIT_SHA", "'HEAD'"]),
    ({"DEAMOE_GIT_SHA": "abc1234", "CHECK": "yes"}, ["CHECK", "0 or 1"]),
    ({"DEAMOE_GIT_SHA": "abc1234", "T_MB": "-5"}, ["T_MB", "'-5'"]),
])
def test_h200_microbench_names_a_bad_variable(sh, tmp_path, env, names):
    assert_one_line_failure(*sh("h200_microbench.sh", OUT=str(tmp_path / "o"), **env), *names)
    assert not (tmp_path / "o").exists()


def test_h200_microbench_names_an_argument_not_ignored(sh, tmp_path):
    """`... h200_microbench.sh MODELS=Qwen3-235B-A22B` measured every model (~14 minutes)."""
    assert_one_line_failure(*sh("h200_microbench.sh", "MODELS=Qwen3-235B-A22B", OUT=str(tmp_path / "o"),
                                DEAMOE_GIT_SHA="abc1234"), "takes no arguments", "'MODELS=Qwen3-235B-A22B'")
    assert not (tmp_path / "o").exists()


def test_h200_microbench_keeps_a_users_log(sh, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "log.txt").write_text("mine")
    before = tree(tmp_path / "o")
    assert_one_line_failure(*sh("h200_microbench.sh", OUT=str(tmp_path / "o"), DEAMOE_GIT_SHA="abc1234"), "log.txt")
    assert tree(tmp_path / "o") == before


def test_h200_microbench_exits_with_its_commands_status(sh, tmp_path):
    out = tmp_path / "o"
    status, err = sh("h200_microbench.sh", OUT=str(out), DEAMOE_GIT_SHA="abc1234", MODELS="Nope")
    assert status == 2 and "unknown model 'Nope'" in (out / "log.txt").read_text()
    # on its own earlier output, without a GPU: the status "not run", exit 0
    status, err = sh("h200_microbench.sh", OUT=str(out), DEAMOE_GIT_SHA="abc1234")
    assert status == 0, (out / "log.txt").read_text()
    assert (out / "status.json").is_file()


@pytest.mark.parametrize("env, names", [
    ({"GPU_RUN_LIMIT": "1h"}, ["GPU_RUN_LIMIT", "'1h'"]),
    # more digits than bash's test compares: the limit was dropped and the run went on unbounded
    ({"GPU_RUN_LIMIT": "99999999999999999999"}, ["GPU_RUN_LIMIT", "below 10^9"]),
    ({"GPU_MPS": "on"}, ["GPU_MPS", "'on'"]),
    ({"DEAMOE_GIT_SHA": "HEAD"}, ["DEAMOE_GIT_SHA", "'HEAD'"]),  # was written into every row as given
])
def test_gpu_run_names_a_bad_variable(sh, tmp_path, env, names):
    assert_one_line_failure(*sh("gpu_run.sh", tmp_path / "o", "all", **env), *names)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, names", [
    (["{o}", "--stag"], ["unknown option '--stag'", "after --"]),  # was handed to Snakemake after the setup
    (["--stage"], ["OUT_DIR comes first", "'--stage'"]),
    (["quality_small"], ["target after OUT_DIR 'quality_small'"]),  # was "name at least one target"
    (["{o}", "--stage", "quality_small"], ["--stage", "quality_small", "next call"]),  # was dropped
    (["{o}", ""], ["an empty target"]),  # an unset "$TARGET": was handed to Snakemake after the setup
])
def test_gpu_run_names_a_bad_argument_before_any_work(sh, tmp_path, args, names):
    assert_one_line_failure(*sh("gpu_run.sh", *[a.format(o=tmp_path / "o") for a in args]), *names)
    assert not (tmp_path / "o").exists() and not (tmp_path / "checkout" / "quality_small").exists()


@pytest.mark.parametrize("mine", ["results.tar.gz", None])
def test_gpu_run_keeps_a_users_files_where_it_writes_its_archives(sh, tmp_path, mine):
    out = tmp_path / "o"
    if mine:
        out.mkdir()
        (out / mine).write_text("mine")
    else:
        out.write_text("mine")  # a file where the folder goes
    before = tree(tmp_path)
    assert_one_line_failure(*sh("gpu_run.sh", out, "all"), str(out))
    assert tree(tmp_path) == before


def test_relative_paths_are_the_callers_when_run_from_another_folder(sh, tmp_path):
    """The scripts run in the repository root: OUT=o from another folder wrote the archives into
    the checkout (gpu_run.sh), and h200_microbench.sh read its default config and src/ from the
    caller's folder ("config file scripts/h200_tables.yaml does not exist")."""
    elsewhere = tmp_path / "my folder"  # a space in it too
    elsewhere.mkdir()
    checkout = tmp_path / "checkout"
    sh("gpu_run.sh", "o", "all", cwd=elsewhere)
    assert (elsewhere / "o" / "results.tar.gz").is_file() and not (checkout / "o").exists()
    status, err = sh("h200_microbench.sh", cwd=elsewhere, OUT="mb", DEAMOE_GIT_SHA="abc1234")
    log = (elsewhere / "mb" / "log.txt").read_text()
    assert status == 0 and (elsewhere / "mb" / "status.json").is_file(), log
    assert not (checkout / "mb").exists()


@pytest.mark.parametrize("env, names", [
    ({"GPU_CORPUS_BYTES": "60MB"}, ["GPU_CORPUS_BYTES", "'60MB'"]),  # was a traceback after the downloads
    ({"GPU_CORPUS_BYTES": "-5"}, ["GPU_CORPUS_BYTES", "'-5'"]),
    ({"GPU_WHEELS_ONLY": "yes"}, ["GPU_WHEELS_ONLY", "0 or 1"]),  # was: the corpus packed as well
])
def test_gpu_wheels_names_a_bad_variable_before_any_download(sh, tmp_path, env, names):
    (tmp_path / "checkout" / ".venv" / "bin").mkdir(parents=True)  # past the .venv check: nothing runs it
    (tmp_path / "checkout" / ".venv" / "bin" / "python").symlink_to("/bin/false")
    assert_one_line_failure(*sh("gpu_wheels.sh", "train", **env), *names)
    assert not (tmp_path / "checkout" / ".whl").exists() and not (tmp_path / "checkout" / ".gpu_data").exists()


def test_gpu_wheels_names_an_argument_not_ignored_before_any_download(sh, tmp_path):
    """`gpu_wheels.sh train test` downloaded the train set as if the second had not been given."""
    (tmp_path / "checkout" / ".venv" / "bin").mkdir(parents=True)  # past the .venv check: nothing runs it
    (tmp_path / "checkout" / ".venv" / "bin" / "python").symlink_to("/bin/false")
    assert_one_line_failure(*sh("gpu_wheels.sh", "train", "test"), "at most one argument", "train test")
    assert not (tmp_path / "checkout" / ".whl").exists() and not (tmp_path / "checkout" / ".gpu_data").exists()


def test_gpu_run_cut_short_while_packing_leaves_no_truncated_archive(sh, tmp_path):
    """tar wrote straight to OUT/results.tar.gz: a call killed mid-pack (a lease running out)
    left half an archive under the name its results are fetched by."""
    (tmp_path / "bin" / "tar").write_text('#!/bin/sh\nprintf half > "$2"\nkill -9 $PPID\n')  # czf ARCHIVE ...
    (tmp_path / "bin" / "tar").chmod(0o755)
    sh("gpu_run.sh", tmp_path / "o", "all")
    assert not (tmp_path / "o" / "results.tar.gz").exists() and not (tmp_path / "o" / "logs.tar.gz").exists()
    (tmp_path / "bin" / "tar").unlink()
    sh("gpu_run.sh", tmp_path / "o", "all")  # the next call packs over what the last one left
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [".deamoe-output", "logs.tar.gz", "results.tar.gz"]


def test_gpu_run_lifts_the_lock_its_killed_snakemake_left(sh, tmp_path):
    """A Snakemake killed at GPU_RUN_LIMIT (SIGINT not obeyed within 20 s) left its lock, and the
    continuation call failed at once with "Directory cannot be locked"; a Snakemake that ended by
    itself leaves no lock to lift."""
    calls = tmp_path / "calls.txt"
    # Snakemake stands in: each call's arguments logged; killed (137) while tmp/kill exists
    (tmp_path / "bin" / "python3").write_text(
        '#!/bin/bash\nif [ "$1 $2" = "-m snakemake" ]; then echo "${*:3}" >> ' f'"{calls}"\n'
        f'  [ -e "{tmp_path}/kill" ] && kill -9 $$\n  exit 0\nfi\nexec "{sys.executable}" "$@"\n')
    (tmp_path / "kill").touch()
    assert sh("gpu_run.sh", tmp_path / "o", "all")[0] == 137
    (tmp_path / "kill").unlink()
    assert sh("gpu_run.sh", tmp_path / "o", "all")[0] == 0
    sh("gpu_run.sh", tmp_path / "o", "all")
    runs = [line.split() for line in calls.read_text().splitlines()]
    profile = ["--workflow-profile", "workflow/profiles/gpu"]
    assert runs[0][:3] == [*profile, "all"]
    assert runs[1] == [*profile, "--unlock", "all"]  # before the continuation, once
    assert [r for r in runs[2:] if "--unlock" in r] == []
