# Shared by every rule file: config validation, the resolved config file, small helpers.
#
# Why a resolved file: every stage command takes `--config PATH` with the whole pipeline config.
# Passing config.yaml itself would miss --configfile/--config overrides and schema defaults, so
# the merged, validated config is written to results/config/resolved-<hash>.yaml, named by a hash
# of its content.  Parsing the workflow (a dry run, --list, --report) writes nothing: the file is
# written when a run starts (`onstart`, or the `resolved_config` rule), and because its name is its
# content, a parse or run with other settings beside a running pipeline writes another file and
# can never change what a running job reads.  Rules get the path in their shell line, not as an
# `input` or a `param` (the hash moves whenever any section changes, which must not rerun
# everything); the config section(s) each rule depends on are `params`, so Snakemake's params
# rerun-trigger reruns exactly the rules whose section changed.

import hashlib
import json
import os
import shlex
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.io import WILDCARD_REGEX
from snakemake.settings.types import DeploymentMethod, ExecMode
from snakemake.utils import validate

SCHEMA_DIR = Path(workflow.basedir) / "workflow" / "schemas"
# this checkout's package: its cross-field checks are the ones the commands run
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from deamoe.checks import config_problems, path_problems
from deamoe.errors import ConfigError
from deamoe.resolved import write_resolved
from deamoe.schema import first_problem, load as load_schema, property_schema, typed_leaves
from deamoe.settings import parse_config_file
from deamoe.shapes import MODELS
from deamoe.snakemake_args import after_dag_built
from deamoe.stale_outputs import stale_outputs
SECTIONS = [
    "analysis", "data", "model", "train", "ablation", "pretrain",
    "eval", "serve", "microbench", "report",
]
PRETRAIN_MODELS = list(MODELS)  # budget-matched baseline and DeaMoE


def config_stop(problems, prefix="config"):
    """Stop the parse on config problems: each a line `config: ...` on stderr, exit status 1, before
    any job.  Not a WorkflowError: Snakemake would print it with the file, line and call stack of
    the Snakefile code that raised it, several lines around the one that matters."""
    for problem in problems:
        print(f"{prefix}: {problem}", file=sys.stderr)
    sys.exit(1)


def configured(fn):
    """Input function `fn` of a rule whose wildcards name what the config defines (a size, a run,
    a length): a target naming one it lacks (`results/quality/big/runs.csv`, a seed no size
    trains) stops while Snakemake builds the DAG, before any job and before the lock, with one line
    naming the wildcards and the key -- not an input function's traceback, nor a job that fails
    after the jobs before it ran.  (A SystemExit passes Snakemake's wrapping of input functions.)"""
    import functools

    @functools.wraps(fn)
    def checked(wildcards, *args, **kwargs):
        try:
            return fn(wildcards, *args, **kwargs)
        except ConfigError as exc:
            named = ", ".join(f"{k}={v}" for k, v in wildcards.items())
            config_stop([f"{named}: {exc}"], prefix="target")

    return checked


def _schema_error(exc, instance, schema_path, prefix=""):
    """One line naming the key at fault.

    Snakemake's validate() flattens the jsonschema error into text without its path, so the same
    instance is checked again (deamoe.schema, the commands' check too) for the best-matching
    error with its path.
    """
    name = Path(schema_path).name.removesuffix(".schema.yaml")
    try:
        problem = first_problem(load_schema(name), instance, prefix)
    except Exception:  # e.g. a $ref this plain re-check cannot resolve: keep Snakemake's text
        problem = None
    if problem is None:
        problem = f"{'section ' + prefix + ': ' if prefix else ''}{' '.join(str(exc).split())}"
    return problem


def check_config_files(paths):
    """Each config file read (config.yaml, --configfile): a key given twice is an error naming
    the file and line -- YAML would keep the second value and drop the first silently."""
    for path in paths:
        try:
            parse_config_file(path, name=str(path))
        except ConfigError as exc:
            config_stop([exc])


def validate_config(cfg):
    """Top-level schema first (profile + which sections exist), then each section's own schema.

    A section's schema is written by the stage that owns it; one not written yet is skipped with a
    warning rather than blocking the rest of the pipeline.
    """
    try:
        validate(cfg, str(SCHEMA_DIR / "config.schema.yaml"))
    except WorkflowError as exc:
        config_stop([_schema_error(exc, cfg, SCHEMA_DIR / "config.schema.yaml")])
    for name in SECTIONS:
        schema = SCHEMA_DIR / f"{name}.schema.yaml"
        if not schema.exists():
            print(f"warning: no schema {schema.name}; section '{name}' not validated",
                  file=sys.stderr)
            continue
        try:
            validate(cfg[name], str(schema))
        except WorkflowError as exc:
            config_stop([_schema_error(exc, cfg[name], schema, prefix=name)])
    # values that are each valid but conflict with another (k_dept > n_dept, a micro-batch that
    # does not divide the batch, ...): the same function the commands run, every conflict a line;
    # then the files and folders it names (a corpus, the evaluation data), which only the
    # workflow checks before any job (a command reads them when it runs)
    doc = json.loads(json.dumps(dict(cfg)))
    problems = config_problems(doc)
    problems += [] if problems else path_problems(doc)
    if problems:
        config_stop(problems)


def _typed_cli_overrides(cfg, overrides, schema):
    """`--config section="{key: 3}"` arrives with every nested value as a string (Snakemake parses
    nested --config values with YAML's BaseLoader); type the leaves the command line set (those
    the merged config still holds as given) against the section's `schema`, as a --configfile's
    would be (deamoe.schema.typed_leaves: a key that takes text keeps it as written)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            _typed_cli_overrides(cfg[key], value, property_schema(schema, key))
        elif isinstance(value, (str, list)) and value and cfg.get(key) == value:
            cfg[key] = typed_leaves(value, property_schema(schema, key))


for _key, _value in dict(workflow.config_settings.config).items():
    if isinstance(_value, dict) and isinstance(config.get(_key), dict):
        _typed_cli_overrides(config[_key], _value, load_schema(_key) if _key in SECTIONS else {})
check_config_files(workflow.configfiles)
validate_config(config)
# plain dicts/lists only (no Snakemake wrappers) so the YAML is readable by any tool
RESOLVED = json.loads(json.dumps(dict(config)))
RESOLVED_TEXT = (
    "# Written by the Snakefile: config.yaml + profile/--config overrides + schema defaults.\n"
    "# Do not edit; edit config.yaml or pass --config / --configfile instead.\n"
    + yaml.safe_dump(RESOLVED, sort_keys=False)
)
RESOLVED_CONFIG = (
    f"results/config/resolved-{hashlib.sha256(RESOLVED_TEXT.encode()).hexdigest()[:16]}.yaml"
)


def write_resolved_config():
    """Write RESOLVED_CONFIG once (temp file + rename).  An existing one is left as it is when it
    holds this very content (its name is the hash of it); one edited or damaged since is written
    again, so that no job reads a config other than the one its name stands for."""
    path = Path(RESOLVED_CONFIG)
    try:
        if path.read_text(encoding="utf-8") == RESOLVED_TEXT:
            return
        print(f"note: {path} differs from the config it is named after (edited?); written again",
              file=sys.stderr)
    except (OSError, UnicodeDecodeError):
        pass  # absent (or unreadable: the write names the problem)
    if problem := write_resolved(path, RESOLVED_TEXT):
        config_stop([problem], prefix="refused before any job")


def foreign_job_outputs(job):
    """Each existing output of `job` that holds something the pipeline did not write, one line
    each (deamoe.io's rules: a file its folder's marker names, a folder written as a whole or empty)."""
    from deamoe.io import OutputPathError, check_output_file
    from deamoe.ownership import foreign_entries

    problems = []
    for f in job.output:
        path = Path(f)
        if not f.is_directory:
            try:
                check_output_file(path)
            except OutputPathError as exc:
                problems.append(f"{exc} (an output of rule {job.rule.name})")
        elif path.is_symlink() or (path.exists() and not path.is_dir()):
            problems.append(f"{path} exists and is not a folder (an output folder of rule "
                            f"{job.rule.name}); move it away or remove it yourself")
        elif path.is_dir() and (foreign := foreign_entries(path)):
            problems.append(f"{path} holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}"
                            f", not written by this workflow (an output folder of rule {job.rule.name}, "
                            "replaced as a whole when it runs); move it away or remove it yourself")
    return problems


# rule name -> job -> the files its command writes beside its declared outputs (kept out of them
# so that Snakemake's cleanup leaves them): checked with the outputs before any job
BESIDE_OUTPUTS = {}


def foreign_outputs(dag, persistence):
    """Every path of this run that holds something the pipeline did not write, one line each.

    Snakemake deletes a job's outputs and logs before it runs the job, so the commands' own
    refusal to replace a file they did not write (deamoe.io) would come too late: a user's file at
    an output path would be gone without a word.  So, before any job: an existing output of any
    job of the run must be the project's (deamoe.io's rules: a file its folder's marker names, a
    folder written as a whole or empty) -- otherwise it would be taken for a result, or deleted --
    the folder a job that will run writes into (`params.out`) must be one its command takes (no
    user's files: the command refused it only after the jobs before it had run), and an existing
    log or benchmark file of a job that will run must be one the workflow wrote:
    named in its folder's marker (recorded here before each run) or, for a log, in Snakemake's
    record of the job's outputs; a benchmark Snakemake wrote starts with its header line.  A file
    that a job's command writes beside its outputs (BESIDE_OUTPUTS: a run's resume state) follows
    the outputs' rules too: the command would refuse it only after the jobs before it had run.
    """
    from deamoe.io import OutputPathError, check_output_file, check_output_folder
    from deamoe.ownership import file_in_the_way, is_ours

    problems, needrun = [], set(dag.needrun_jobs())
    resolved = Path(RESOLVED_CONFIG)  # written at every start: a folder, or a file in its way
    if resolved.is_symlink() or (resolved.exists() and not resolved.is_file()):
        problems.append(f"{resolved} exists and is not a file (the resolved config); move it away "
                        "or remove it yourself")
    elif blocker := file_in_the_way(resolved):
        problems.append(f"{blocker} is a file where the folder of {resolved} (the resolved config) "
                        "goes; move it away or remove it yourself")
    for job in dag.jobs:
        if job.rule.name == "resolved_config":
            continue  # named by its content: write_resolved_config's own business
        known = len(problems)
        problems += foreign_job_outputs(job)
        if job not in needrun:
            continue
        for f in BESIDE_OUTPUTS.get(job.rule.name, lambda job: [])(job):
            try:
                check_output_file(f)
                check_output_folder(Path(f).parent)
            except OutputPathError as exc:
                problems.append(f"{exc} (rule {job.rule.name} writes it beside its outputs)")
        out = getattr(job.params, "out", None)  # the folder its command writes into (`--out {params.out}`)
        if out is not None and len(problems) == known:  # (a user's file at one of its outputs: named above)
            try:
                check_output_folder(out)
            except OutputPathError as exc:
                problems.append(f"{exc} (rule {job.rule.name}'s output folder)")
        logged = {log for f in job.output for log in (persistence.log(f) or [])}
        for f in [*job.log, *([job.benchmark] if job.benchmark else [])]:
            if not os.path.lexists(f) and (blocker := file_in_the_way(f)):
                problems.append(f"{blocker} is a file where the folder of {f} (rule {job.rule.name}'s "
                                "log) goes; move it away or remove it yourself")
        for f in job.log:
            if os.path.lexists(f) and not (is_ours(f) or str(f) in logged):
                problems.append(f"{f} exists and was not written by this workflow (rule {job.rule.name}'s "
                                "log); move it away or remove it yourself")
        bench = str(job.benchmark) if job.benchmark else None
        if bench and os.path.lexists(bench) and not is_ours(bench):
            try:
                ours = Path(bench).read_text(errors="replace").startswith("s\th:m:s")
            except OSError:
                ours = False
            if not ours:
                problems.append(f"{bench} exists and was not written by this workflow (rule "
                                f"{job.rule.name}'s benchmark); move it away or remove it yourself")
    return problems


def record_logs(dag):
    """Name the log and benchmark files of the jobs about to run in their folders' markers."""
    from deamoe.errors import DeaMoEError
    from deamoe.ownership import record_output

    for job in dag.needrun_jobs():
        for f in [*job.log, *([job.benchmark] if job.benchmark else [])]:
            try:
                record_output(str(f))
            except DeaMoEError as exc:  # its marker is no record (a link, not a file)
                config_stop([exc], prefix="refused before any job")
            except OSError as exc:  # a full disk, a folder that cannot be made: not the stack
                config_stop([f"{f}: cannot name it in its folder's .deamoe-output ({exc.strerror or exc}; "
                             f"rule {job.rule.name}'s log); free some space or move away what is in the way"],
                            prefix="refused before any job")


onstart:
    problems = foreign_outputs(workflow.dag, workflow.persistence)
    if problems:
        for problem in problems:
            print(f"refused before any job: {problem}", file=sys.stderr)
        sys.exit(1)
    record_logs(workflow.dag)
    write_resolved_config()


_snakemake_delete_output = workflow.delete_output


def _delete_only_ours(only_temp=False, dryrun=False):
    """`snakemake --delete-all-output`, dry run too (`--delete-temp-output` as it is): Snakemake deletes
    every existing output path of the DAG, folders with all they hold, and runs no `onstart`, so
    a user's file at an output path (which a run refuses to replace) or added to an output folder
    would be gone without a word.  Refuse before anything is deleted, naming each such path."""
    if only_temp:  # the workflow marks no output temp()
        return _snakemake_delete_output(only_temp=only_temp, dryrun=dryrun)
    workflow._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True)
    workflow._build_dag()
    problems = [p for job in workflow.dag.jobs if job.rule.name != "resolved_config"
                for p in foreign_job_outputs(job)]
    if problems:
        for problem in problems:
            print(f"refused, nothing deleted: {problem}", file=sys.stderr)
        sys.exit(1)
    _snakemake_delete_output(only_temp=only_temp, dryrun=dryrun)
    if not dryrun:  # the markers no longer name what is gone: a file put there later is a user's
        from deamoe.ownership import forget_output

        for f in {f for job in workflow.dag.jobs for f in job.output if not f.is_directory}:
            forget_output(f)


workflow.delete_output = _delete_only_ours


def _no_foreign_result_when_nothing_to_do():
    """Where a run finds no job to run, Snakemake says "Nothing to be done" and runs no `onstart`,
    so a user's file (or a folder) at an output path was taken for the result without a word
    (`snakemake table1` over a table of one's own): the outputs are checked as `onstart` checks
    them, and the run stops naming each.  Before that, in every run: an output left missing or
    damaged (deamoe.stale_outputs) is a note, or a stop where a job of this run reads it."""
    if workflow.exec_mode != ExecMode.DEFAULT:
        return
    notes, problems = stale_outputs(workflow.dag, skip=("resolved_config",))
    if problems:
        config_stop(problems, prefix="refused before any job")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if workflow.dryrun or len(workflow.dag):
        return  # a job to run: onstart checks; a dry run reads only
    problems = [p for job in workflow.dag.jobs if job.rule.name != "resolved_config"
                for p in foreign_job_outputs(job)]
    if problems:
        config_stop(problems, prefix="refused, nothing run")


workflow.execute = after_dag_built(workflow, _no_foreign_result_when_nothing_to_do)


def target_problems(wf):
    """Each target, --forcerun/-R, --until or --omit-from value that names neither a rule nor a
    path a rule writes, one line each (Snakemake's "No rule to produce X (if you use input
    functions ...)" came after its banner); an absolute path of an output, which Snakemake does
    not match against the rules' relative outputs, is named with the relative path to give."""
    given = [(flag, item) for flag, items in (
        ("", wf.dag_settings.targets), ("--forcerun ", wf.dag_settings.forcerun),
        ("--until ", wf.dag_settings.until), ("--omit-from ", wf.dag_settings.omit_from))
        for item in sorted(items or ()) if not wf.is_rule(item)]
    # a rule of many jobs named as a target: Snakemake's "Target rules may not contain wildcards"
    # came after its banner, naming neither the rule nor what to give instead
    problems = [f"{name}: rule {name} runs one job per {', '.join(f'{{{w}}}' for w in rule.wildcard_names)}; "
                f"give one of its outputs with that filled in "
                f"({WILDCARD_REGEX.sub(lambda m: '{' + m.group('name') + '}', str(rule.output[0]))}), or a "
                "rule that needs them"
                for name in sorted(wf.dag_settings.targets or ()) if wf.is_rule(name)
                for rule in [wf.get_rule(name)] if rule.has_wildcards()]
    for flag, item in given:
        if not item.strip():  # an unset shell variable (`snakemake "$TARGET"`): relpath raised
            problems.append(f"{flag}{item!r}: an empty target; give a rule's name or a path a rule "
                            "writes (`snakemake --list-rules` lists the rules)")
            continue
        path = os.path.relpath(item)  # as Snakemake takes a relative one
        # a file inside an output folder (results/microbench/status.json): the folder is the target
        folder = next((p for p in map(str, Path(path).parents) if any(r.is_producer(p) for r in wf.rules)), None)
        if folder and not any(rule.is_producer(path) for rule in wf.rules):
            problems.append(f"{flag}{item}: lies inside {folder}, an output folder that its rule writes as a "
                            f"whole; give {folder}")
        elif not any(rule.is_producer(path) for rule in wf.rules):
            problems.append(f"{flag}{item}: no rule is named so or writes it (`snakemake --list-rules` "
                            "lists the rules; outputs are paths relative to the working directory, e.g. "
                            "results/analysis/table1.csv)")
        elif os.path.isabs(item):
            problems.append(f"{flag}{item}: Snakemake matches outputs by their relative path; give {path}")
    return problems


_snakemake_prepare_dag = workflow._prepare_dag


def _prepare_dag_of_known_targets(*args, **kwargs):
    """Snakemake's DAG set-up, after the targets are checked (they are known only once the parse
    is over): one line each before any job, the run stopped."""
    if problems := target_problems(workflow):
        config_stop(problems, prefix="target")
    return _snakemake_prepare_dag(*args, **kwargs)


workflow._prepare_dag = _prepare_dag_of_known_targets


# Cheap joins of finished results and the report: they run where Snakemake runs (a SLURM login
# node), not as cluster jobs.
localrules:
    resolved_config,
    table1,
    loading,
    pretrain,
    ablation,
    eval_tables,
    serve_tables,
    quality,
    quality_length,
    report,


rule resolved_config:
    """`snakemake --cores 1 resolved_config`: write the resolved config and nothing else."""
    output:
        RESOLVED_CONFIG,
    run:
        write_resolved_config()


def section(name):
    """A config section as a plain dict (a rule param: changing it reruns that rule)."""
    return RESOLVED.get(name, {})


def folder(levels=1, of="output"):
    """A rule param: the folder `levels` above the rule's first output (or input) file, so shell
    lines name the folders a command reads or writes through the rule's own files."""
    return lambda wildcards, input, output: str(Path((output if of == "output" else input)[0])
                                                .parents[levels - 1])




# The interpreter that runs Snakemake runs the stage commands, unless --sdm conda supplies one:
# `.venv/bin/snakemake` then works without activating the virtual environment.
_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PY = "python" if _CONDA else shlex.quote(sys.executable)
DEAMOE = f"{PY} -m deamoe"
