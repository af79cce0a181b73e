"""A number in exponent form that YAML reads as text, and a target inside an output folder.

PyYAML (YAML 1.1), which reads config files and Snakemake's --config, takes `1e-3` and `1.0e3`
for strings (a float needs a dot and a signed exponent), so `lr: 1e-3` was refused as "'1e-3' is
not of type 'number'", a number to anyone reading it.  The line now says why and what to write,
from the workflow and from every command alike.  A file inside a folder output
(`results/microbench/status.json`) named as a target read "no rule ... writes it", though the
README lists it as the microbench rule's output: the line now names the folder to give.
"""

from __future__ import annotations

import pytest

from cli_battery import REPO, assert_one_line_error, run_cli
from deamoe.ownership import mark_whole, missing_entries
from deamoe.schema import number_as_text


@pytest.mark.parametrize("value, kind, written", [
    ("1e-3", "number", "0.001"), ("1.0e3", "number", "1000.0"), ("1e-05", "number", "1.0e-05"),
    ("1e20", "number", "1.0e+20"), ("1e9", "integer", "1000000000"), ("6.4e1", ["integer"], "64"),
])
def test_a_number_yaml_reads_as_text_is_named_with_what_to_write(value, kind, written):
    import yaml

    line = number_as_text("train.lr", value, kind)
    assert line.startswith(f"train.lr: {value!r} is text to the YAML") and line.endswith(f"; write {written}")
    assert yaml.safe_load(written) == float(value)  # what it says to write is that number to YAML


@pytest.mark.parametrize("value, kind", [
    ("abc", "number"), ("1e400", "number"), ("nan", "number"), ("1.5e0", "integer"), ("1e-3", "string"),
    (0.001, "number"), ("1e-3", ["string", "number"]),
    ("8", "integer"), ("8", "number"), ("0.5", "number"), ("1.0e+3", "number"),  # quoted: text on purpose
])
def test_other_values_keep_the_schemas_own_line(value, kind):
    assert number_as_text("train.lr", value, kind) is None


def test_a_command_reading_lr_1e_3_names_it(work, capsys):
    text = (REPO / "config.yaml").read_text()
    assert "  lr: 3.0e-3\n" in text
    (work / "c.yaml").write_text(text.replace("  lr: 3.0e-3\n", "  lr: 1e-3\n"))
    status, err = run_cli(["table1", "--config", "c.yaml", "--out", "t.csv"], capsys)
    assert_one_line_error(status, err, "train.lr: '1e-3' is text to the YAML", "write 0.001")
    assert not (work / "t.csv").exists()


def test_the_workflow_names_it_before_any_job(snakemake, workdir):
    proc = snakemake(workdir, "-n", "--cores", "1", "--config", "model={'rms_norm_eps': 1e-5}")
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith("Config file config.yaml")]
    assert proc.returncode == 1 and lines == [
        "config: model.rms_norm_eps: '1e-5' is text to the YAML that config files are read with, not a number "
        "(an exponent needs a dot before it and a sign); write 1.0e-05"], proc.stderr[-2000:]


@pytest.mark.parametrize("target, folder", [
    ("results/microbench/status.json", "results/microbench"),
    ("results/serve/baseline/c1.json", "results/serve/baseline"),
])
def test_a_file_inside_an_output_folder_as_a_target_names_the_folder(snakemake, workdir, target, folder):
    proc = snakemake(workdir, "-n", "--cores", "1", target)
    assert proc.returncode == 1
    assert f"target: {target}: lies inside {folder}, an output folder that its rule writes as a whole; " \
           f"give {folder}" in proc.stderr.splitlines(), proc.stderr[-2000:]
    assert not (workdir / "results").exists()


def test_missing_entries_are_the_listed_files_gone(tmp_path):
    folder = tmp_path / "checkpoint"
    (folder / "sub").mkdir(parents=True)
    for name in ("a.json", "b.bin", "sub/c.txt"):
        (folder / name).write_text("x")
    mark_whole(folder)
    assert missing_entries(folder) == []
    (folder / "b.bin").unlink()
    (folder / "sub" / "c.txt").unlink()
    (folder / "new.txt").write_text("a user's")  # an added file is foreign_entries' business
    assert missing_entries(folder) == ["b.bin", "sub/c.txt"]
    assert missing_entries(tmp_path) == []  # no marker: no list to miss from
