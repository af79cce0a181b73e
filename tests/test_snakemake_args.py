"""The Snakemake command-line checks the Snakefile runs before Snakemake reads its config: each
fault Snakemake would pass over without a word is one line; a sound command line is None."""

from __future__ import annotations

from pathlib import Path

import pytest

from deamoe import snakemake_args as sa

ROOT = Path(__file__).resolve().parents[1]
GPU_FILES = "workflow/profiles/gpu/pipeline.yaml workflow/profiles/gpu/train-sections.yaml"


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch):  # Snakemake runs at the repository root; the profile's paths are relative to it
    monkeypatch.chdir(ROOT)


def _argv(*args):
    return ["snakemake", *args]


@pytest.mark.parametrize("args", [
    ("--workflow-profile", "workflow/profiles/gpu", "--configfile", "my.yaml"),
    ("--workflow-profile=workflow/profiles/gpu", "--configfiles", "my.yaml", "--cores", "1"),
    ("--workflow-profile", "workflow/profiles/slurm", "--configfile=my.yaml"),
    # one of the two named is not enough
    ("--workflow-profile", "workflow/profiles/gpu", "--configfile", "workflow/profiles/gpu/pipeline.yaml", "my.yaml"),
])
def test_a_configfile_that_drops_the_profiles_scale_is_named(args):
    line = sa.command_line_problem(_argv(*args), ROOT)
    profile = "slurm" if "slurm" in " ".join(args) else "gpu"
    assert line.startswith(f"config: --configfile replaces the configfile list of the profile "
                           f"workflow/profiles/{profile}, dropping its scale (workflow/profiles/{profile}/")
    assert line.endswith("my.yaml (or set `profile:` in yours: a scale of its own)") and "\n" not in line
    assert f"--configfile workflow/profiles/{profile}/pipeline.yaml workflow/profiles/{profile}/train-sections.yaml" in line


@pytest.mark.parametrize("args", [
    ("--workflow-profile", "workflow/profiles/gpu", "--configfile", *GPU_FILES.split(), "my.yaml"),
    ("--workflow-profile", "workflow/profiles/gpu", "--cores", "1"),  # no --configfile: the profile's list
    ("--configfile", "my.yaml"),  # no profile: nothing to drop
    ("--workflow-profile", "none", "--configfile", "my.yaml"),
    ("--cores", "all"),
])
def test_a_sound_command_line_passes(args):
    assert sa.command_line_problem(_argv(*args), ROOT) is None


def test_each_check_names_its_fault():
    assert sa.workflow_profile_problem(_argv("--workflow-profile", "workflow/profiles/gpus"), ROOT) == (
        "profile: --workflow-profile workflow/profiles/gpus: no such profile folder "
        "(this workflow's: workflow/profiles/gpu, workflow/profiles/slurm)")
    assert sa.repeated_config_option(_argv("-C", "a=1", "--config=b=2")).startswith(
        "config: --config is given twice")
    assert sa.repeated_config_option(_argv("--config", "a=1", "b=2")) is None


def test_a_broken_config_yaml_is_its_first_line(tmp_path):
    (tmp_path / "config.yaml").write_text("train: [\n")
    assert sa.config_yaml_problem(str(tmp_path / "config.yaml")).startswith(f"config: {tmp_path / 'config.yaml'}")
    (tmp_path / "config.yaml").write_text("train: {steps: 5}\n")
    assert sa.config_yaml_problem(str(tmp_path / "config.yaml")) is None


def test_a_configfile_that_names_its_own_scale_replaces_the_profiles(tmp_path):
    # the SLURM test's way: a reduced pipeline of its own on the profile's machines
    own = tmp_path / "own.yaml"
    own.write_text("profile: tiny\ntrain: {steps: 8}\n")
    argv = _argv("--workflow-profile", "workflow/profiles/slurm", "--configfile", str(own))
    assert sa.command_line_problem(argv, ROOT) is None
    own.write_text("train: {steps: 8}\n")
    assert sa.command_line_problem(argv, ROOT).startswith("config: --configfile replaces")
