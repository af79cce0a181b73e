# DeaMoE reproduction pipeline.  `snakemake --cores all` runs every stage at the scale of
# config.yaml (the tiny CPU default); `--workflow-profile workflow/profiles/gpu` (or slurm) changes
# the scale and where jobs run.  Each rule calls one `python -m deamoe <command>`; see README.md.

import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


def _config_yaml_problem(path="config.yaml"):
    """config.yaml's own fault, as one line naming its file and line, before Snakemake reads it
    (Snakemake's message names neither); None when it parses to a mapping."""
    sys.path.insert(0, str(Path(workflow.basedir) / "src"))
    from deamoe.errors import ConfigError
    from deamoe.settings import parse_config_file

    try:
        parse_config_file(path, name=path)
    except ConfigError as exc:
        return str(exc).splitlines()[0]
    return None


def _workflow_profile_problem(argv=sys.argv):
    """`--workflow-profile PATH` naming no folder: Snakemake drops it without a word and runs at
    config.yaml's scale (the tiny CPU pipeline, not the GPU one asked for), so name it here."""
    args = list(argv[1:])
    given = [v for i, a in enumerate(args) for v in
             ([args[i + 1]] if a == "--workflow-profile" and i + 1 < len(args) else
              [a.split("=", 1)[1]] if a.startswith("--workflow-profile=") else [])]
    if not given or given[-1] == "none":
        return None
    name = Path(given[-1])
    if any(p.exists() for p in (name, Path("profiles") / name, Path(workflow.basedir) / "profiles" / name)):
        return None
    shipped = sorted(p.parent.name for p in (Path(workflow.basedir) / "workflow" / "profiles").glob("*/config.yaml"))
    return (f"--workflow-profile {name}: no such profile folder (this workflow's: "
            f"{', '.join(f'workflow/profiles/{n}' for n in shipped)})")


def _repeated_config_option(argv=sys.argv):
    """`--config` or `--configfile` given twice on the command line: Snakemake keeps the last one's
    values and drops the earlier ones' without a word (`--config train="{steps: 5}" --config
    eval="{limit: 2}"` trains 300 steps), so name it."""
    same = {"-C": "--config", "--config": "--config", "--configfile": "--configfile",
            "--configfiles": "--configfile"}
    given = [same.get(a.split("=", 1)[0]) for a in argv[1:]]
    twice = next((g for i, g in enumerate(given) if g and g in given[:i]), None)
    if twice:
        return (f"{twice} is given twice; Snakemake would keep only the last one's values: give them "
                f"all after one {twice} ({twice} A B ...)")
    return None


_problem = _config_yaml_problem() or _repeated_config_option()
if _problem:
    print(f"config: {_problem}", file=sys.stderr)
    sys.exit(1)
if _problem := _workflow_profile_problem():
    print(f"profile: {_problem}", file=sys.stderr)
    sys.exit(1)


configfile: "config.yaml"


# Validate before any job runs (unknown keys, wrong types, out-of-range values name the key),
# fill schema defaults, then write the merged config that every command reads.
include: "workflow/rules/common.smk"


# The HTML report's front page: the headline the report rule computes from the tables, above the
# workflow's description (workflow/report/workflow.rst), which stands alone until that rule ran
FRONT_PAGE = "reports/workflow.rst"


report: str(Path(FRONT_PAGE).absolute()) if Path(FRONT_PAGE).is_file() else "workflow/report/workflow.rst"


include: "workflow/rules/analysis.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/quality.smk"
include: "workflow/rules/serve.smk"
include: "workflow/rules/microbench.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        rules.report.output,
