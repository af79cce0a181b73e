"""An output that Snakemake leaves missing or damaged without a word, after the session's run.

Snakemake rebuilds a missing output only for a job that runs anyway: where what is made from it
is newer (a failed job's outputs, which Snakemake deletes, with the report from before still
there), a plain rerun said "Nothing to be done" and the results stayed gone; and a checkpoint
folder lacking a file it was written with was whole to it, so an evaluation of it failed only
after the jobs before it ran.  Now the first is a note naming the output and the command that
makes it again, the second a refusal before any job."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from test_dag import _planned

REDUCED = str(Path(__file__).with_name("reduced.yaml"))


@pytest.fixture
def copied(tiny_pipeline, tmp_path):
    root = tmp_path / "main"  # a copy: the session's run stays as other tests read it
    shutil.copytree(tiny_pipeline, root, symlinks=True)
    return root


@pytest.mark.slow
def test_a_missing_middle_output_is_named_with_the_command_that_makes_it(snakemake, copied):
    (copied / "results" / "ablation" / "summary.csv").unlink()
    proc = snakemake(copied, "--cores", "2", "--configfile", REDUCED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith("note: results/ablation/summary.csv is missing (rule ablation)")
    assert "`snakemake --cores all --forcerun results/ablation/summary.csv`" in notes[0]
    assert not (copied / "results" / "ablation" / "summary.csv").exists()  # nothing ran
    # what the note says to run makes it again, and the report after it
    again = snakemake(copied, "-n", "--cores", "2", "--configfile", REDUCED,
                      "--forcerun", "results/ablation/summary.csv")
    assert _planned(again) == {"ablation": 1, "report": 1, "all": 1}, again.stderr[-2000:]


@pytest.mark.slow
def test_a_checkpoint_lacking_its_weights_is_refused_before_the_evaluation_that_reads_it(snakemake, copied):
    checkpoint = next((copied / "results" / "train").glob("pretrain-*-baseline-s0/checkpoint"))
    (checkpoint / "model.safetensors").unlink()
    kept = sorted(p.name for p in checkpoint.iterdir())
    # (an evaluation setting changed: the evaluations run again, reading the checkpoints)
    proc = snakemake(copied, "--cores", "2", "--configfile", REDUCED, "--config", "eval={'batch_size': 3}")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("refused before any job: ")]
    rel = checkpoint.relative_to(copied)
    assert errors == [f"refused before any job: {rel} lacks model.safetensors, of the files it was written "
                      f"with (rule train); rule eval reads it in this run; `snakemake --cores all --forcerun "
                      f"{rel}` makes it again, and what is made from it"], proc.stderr[-2000:]
    assert sorted(p.name for p in checkpoint.iterdir()) == kept
    assert list((copied / "results" / "eval").glob("*/lm_eval.json"))  # no job ran: nothing deleted
    # with no job to read it, a plain run notes it and does nothing
    plain = snakemake(copied, "--cores", "2", "--configfile", REDUCED)
    assert plain.returncode == 0 and f"note: {rel} lacks model.safetensors" in plain.stderr, plain.stderr[-2000:]


def test_a_complete_or_fresh_tree_has_no_note(snakemake, workdir):
    """A fresh tree, and one where a run stops early (--until): missing outputs everywhere, but
    nothing made from them, so no note."""
    for args in ([], ["--until", "train"], ["--omit-from", "report"]):
        proc = snakemake(workdir, "-n", "--cores", "2", *args)
        assert proc.returncode == 0 and "note:" not in proc.stderr, (args, proc.stderr[-2000:])
