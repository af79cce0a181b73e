"""Checks of the Snakemake command line that started the workflow, run by the Snakefile before
Snakemake reads its config: each case here is one Snakemake accepts without a word while running
something other than what the user asked for.  Each returns one line (the fault and what to give
instead) or None; the Snakefile prints it and stops.  Also the one hook the workflow puts
around Snakemake's run (after_dag_built), kept out of the Snakefile for the reason it gives.
"""

from __future__ import annotations

import math
from pathlib import Path

from deamoe.errors import ConfigError
from deamoe.settings import parse_config_file

# Snakemake's spellings of the two config options (argparse also takes unambiguous prefixes,
# which no user types for these)
_OPTION = {"-C": "--config", "--config": "--config", "--configfile": "--configfile",
           "--configfiles": "--configfile"}


def _values(argv: list[str], names: tuple[str, ...]) -> list[list[str]]:
    """The values after each occurrence of an option in `names` (`--opt a b` until the next
    option, or `--opt=a`), one list per occurrence."""
    found, args = [], argv[1:]
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name not in names:
            continue
        if eq:
            found.append([value])
            continue
        rest = args[i + 1:]
        end = next((j for j, b in enumerate(rest) if b.startswith("-")), len(rest))
        found.append(rest[:end])
    return found


def config_yaml_problem(path: str = "config.yaml") -> str | None:
    """config.yaml's own fault, as one line naming its file and line, before Snakemake reads it
    (Snakemake's message names neither); None when it parses to a mapping."""
    try:
        parse_config_file(path, name=path)
    except ConfigError as exc:
        return "config: " + str(exc).splitlines()[0]
    return None


def repeated_config_option(argv: list[str]) -> str | None:
    """`--config` or `--configfile` given twice: Snakemake keeps the last one's values and drops
    the earlier ones' (`--config train="{steps: 5}" --config eval="{limit: 2}"` trains 300 steps)."""
    given = [_OPTION.get(a.split("=", 1)[0]) for a in argv[1:]]
    twice = next((g for i, g in enumerate(given) if g and g in given[:i]), None)
    if twice:
        return (f"config: {twice} is given twice; Snakemake would keep only the last one's values: "
                f"give them all after one {twice} ({twice} A B ...)")
    return None


def _leaves(node, path: tuple[str, ...], twice: list):
    """Each key path a composed YAML node sets; a key given twice in one mapping (composing keeps
    both, where loading keeps only the last) goes into `twice`."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        keys = [str(key.value) for key, _ in node.value]
        twice += [(*path, k) for i, k in enumerate(keys) if k in keys[:i]]
        for key, (_, value) in zip(keys, node.value):
            yield from _leaves(value, (*path, key), twice)
    else:
        yield path


def repeated_config_key(argv: list[str]) -> str | None:
    """A key the --config items set twice (`train="{steps: 5, steps: 6}"`, or `train="{steps: 50}"
    train="{steps: 5}"`, or `train=5 train="{steps: 5}"`): Snakemake merges the items and keeps the
    last value without a word, dropping the first -- as YAML would in a config file, where the
    workflow refuses it (deamoe.readers.load_yaml).  Items setting different keys of one section
    merge, and are fine."""
    import yaml

    seen: list[tuple[str, ...]] = []
    for item in (v for values in _values(argv, ("-C", "--config")) for v in values):
        key, eq, value = item.partition("=")
        if not eq:
            continue  # Snakemake names an item that is no KEY=VALUE
        try:  # as Snakemake reads a value: its quotes stripped, YAML without types
            node = yaml.compose(value.strip("'\""), Loader=yaml.BaseLoader)
        except yaml.YAMLError:
            node = None  # not YAML: a text value (the schema names it where text is no good)
        twice: list[tuple[str, ...]] = []
        for path in _leaves(node, (key,), twice):
            clash = next((p for p in seen if p[:len(path)] == path or path[:len(p)] == p), None)
            if clash and not twice:
                twice.append(clash if len(clash) < len(path) else path)
            seen.append(path)
        if twice:
            return (f"config: --config sets {'.'.join(twice[0])} twice; Snakemake would keep only the "
                    "last value and drop the first without a word: give each key once")
    return None


def profile_folder(argv: list[str], basedir: str | Path) -> tuple[str, Path | None] | None:
    """(the --workflow-profile given, the folder Snakemake takes it from or None where there is
    none); None when no profile is given (or `none`)."""
    given = _values(argv, ("--workflow-profile",))
    if not given or not given[-1] or given[-1][0] == "none":
        return None
    name = Path(given[-1][0])
    found = (name, Path("profiles") / name, Path(basedir) / "profiles" / name)
    return str(name), next((p for p in found if p.is_dir()), None)


def workflow_profile_problem(argv: list[str], basedir: str | Path) -> str | None:
    """`--workflow-profile PATH` naming no folder: Snakemake drops it without a word and runs at
    config.yaml's scale (the tiny CPU pipeline, not the GPU one asked for)."""
    profile = profile_folder(argv, basedir)
    if profile is None or profile[1] is not None:
        return None
    shipped = sorted(p.parent.name for p in (Path(basedir) / "workflow" / "profiles").glob("*/config.yaml"))
    return (f"profile: --workflow-profile {profile[0]}: no such profile folder (this workflow's: "
            f"{', '.join(f'workflow/profiles/{n}' for n in shipped)})")


def _sets_profile(path: str) -> bool:
    """Whether config file `path` names its own scale (the top-level `profile` key)."""
    try:
        return "profile" in parse_config_file(path)
    except ConfigError:
        return False  # the config check names a broken or missing file


def profile_configfiles_problem(argv: list[str], basedir: str | Path) -> str | None:
    """A `--configfile` on the command line replaces the profile's `configfile` list (command-line
    options override a profile's), so the profile's scale (its pipeline.yaml, train-sections.yaml)
    would be dropped and the run would be config.yaml's tiny pipeline on the profile's resources --
    unless a file given names its own scale (`profile:`), which is how a scale of one's own runs on
    a profile's machines (the SLURM test runs a reduced pipeline so)."""
    profile = profile_folder(argv, basedir)
    given = _values(argv, ("--configfile", "--configfiles"))
    if profile is None or profile[1] is None or not given or not (profile[1] / "config.yaml").is_file():
        return None
    try:
        settings = parse_config_file(profile[1] / "config.yaml")
    except ConfigError:
        return None  # Snakemake names a broken profile itself
    listed = settings.get("configfile", settings.get("configfiles")) or []
    listed = [listed] if isinstance(listed, str) else [str(f) for f in listed]
    theirs, yours = ({Path(f).resolve() for f in files} for files in (listed, given[-1]))
    missing = [f for f in listed if Path(f).resolve() not in yours]
    if not missing or any(Path(g).resolve() not in theirs and _sets_profile(g) for g in given[-1]):
        return None
    return (f"config: --configfile replaces the configfile list of the profile {profile[0]}, dropping "
            f"its scale ({', '.join(missing)}); name its files first: --configfile "
            f"{' '.join(listed)} {' '.join(given[-1])} (or set `profile:` in yours: a scale of its own)")


def resource_override_problem(workflow) -> str | None:
    """--set-threads or --set-resources (or a profile's set-threads, set-resources) naming no rule
    of the workflow, which Snakemake drops without a word (`trian=8` left train on its own
    threads), or threads that are no whole number >= 1 (`train=0` passed a dry run and handed the
    job 0 threads); an expression (`2*threads`) is Snakemake's to evaluate.  Checked once the
    rules are defined."""
    settings, rules = workflow.resource_settings, sorted(r.name for r in workflow.rules)
    for option, given in (("--set-threads", settings.overwrite_threads),
                          ("--set-resources", settings.overwrite_resources)):
        unknown = next((name for name in given if name not in rules), None)
        if unknown is not None:
            return f"resources: {option} names {unknown!r}, no rule of this workflow (rules: {', '.join(rules)})"
    for rule, threads in settings.overwrite_threads.items():
        raw = getattr(threads, "raw", threads)
        try:
            number = float(raw)
        except (TypeError, ValueError):
            continue
        if not (math.isfinite(number) and number >= 1 and number == int(number)):  # nan, inf too
            return f"resources: --set-threads {rule}={raw}: threads must be a whole number >= 1"
    return None


def after_dag_built(workflow, check):
    """`workflow.execute` (a run, dry or not) that calls `check()` once the run's DAG is built,
    before any job.  Defined here, not in the Snakefile: Snakemake names the innermost frame of
    Snakefile code an error passes through as its origin, so a wrapper there turned every failed
    run's last lines into "WorkflowError in file .../common.smk, line N"."""
    execute, build = workflow.execute, workflow._build_dag

    def build_and_check():
        build()
        check()

    def run(*args, **kwargs):
        workflow._build_dag = build_and_check
        try:
            return execute(*args, **kwargs)
        finally:
            workflow._build_dag = build

    return run


def command_line_problem(argv: list[str], basedir: str | Path) -> str | None:
    """The first of the checks above that finds a fault, as the line to print; None for none."""
    return (config_yaml_problem() or repeated_config_option(argv) or repeated_config_key(argv)
            or workflow_profile_problem(argv, basedir) or profile_configfiles_problem(argv, basedir))
