"""Outputs a Snakemake run leaves missing or damaged without a word, named before any job.

Snakemake rebuilds a missing output only for a job that runs anyway, or one whose output is a
target: where what is made from it is newer (a failed job's outputs, which Snakemake deletes,
with the report before it still there; a file deleted by hand), it says "Nothing to be done", and
a folder output missing a file it was written with (a checkpoint without its weights) is whole
to it, going by its date.  The Snakefile prints each as a note with the command that makes it
again, and stops where a job of this run would read a damaged folder (it would fail only after
the jobs before it ran).  Light imports only: the Snakefile imports this module.
"""

from __future__ import annotations

import os
from pathlib import Path

from deamoe.ownership import missing_entries


def _fault(f) -> str | None:
    """Why output `f` (a Snakemake output file) is not what its job wrote, or None."""
    if not os.path.lexists(f):
        return "is missing"
    lost = missing_entries(f) if f.is_directory and Path(f).is_dir() else []
    if lost:
        more = f" and {len(lost) - 1} more" if len(lost) > 1 else ""
        return f"lacks {lost[0]}{more}, of the files it was written with"
    return None


def stale_outputs(dag, skip: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(notes, problems): one line for each job of `dag` that will not run although an output of
    it is missing or damaged while a job reading it counts as up to date (all its own outputs
    there) -- a note -- or will run (a problem: it would fail on it).  Rules in `skip` are left out."""
    needrun = set(dag.needrun_jobs())
    notes, problems = [], []
    for job in dag.jobs:
        if job in needrun or job.rule.name in skip:
            continue
        faults = [(f, why) for f in job.output if (why := _fault(f))]
        if not faults:
            continue
        readers = dag.depending[job]
        running = sorted(j.rule.name for j, files in readers.items() if j in needrun
                         and any(f in files for f, _ in faults))
        made = any(j not in needrun and j.output and all(os.path.lexists(o) for o in j.output)
                   for j in readers)
        (f, why), more = faults[0], len(faults) - 1
        line = (f"{f} {why}{f' (and {more} more of its outputs)' if more else ''} (rule {job.rule.name})"
                f"{'; rule ' + running[0] + ' reads it in this run' if running else ''}"
                f"{'' if running else ', but what is made from it is up to date, so Snakemake leaves it'}; "
                f"`snakemake --cores all --forcerun {f}` makes it again, and what is made from it")
        if running:
            problems.append(line)
        elif made:
            notes.append(line)
    return notes, problems
