# DeaMoE reproduction pipeline.  `snakemake --cores all` runs every stage at the scale of
# config.yaml (the tiny CPU default); `--workflow-profile workflow/profiles/gpu` (or slurm) changes
# the scale and where jobs run.  Each rule calls one `python -m deamoe <command>`; see README.md.

import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


# The command line's own faults that Snakemake would pass over without a word (a misspelled
# --workflow-profile, --config given twice, a --configfile that drops the profile's scale), and a
# broken config.yaml, as one line before Snakemake reads the config (deamoe.snakemake_args).
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from deamoe.snakemake_args import command_line_problem, resource_override_problem

if _problem := command_line_problem(sys.argv, workflow.basedir):
    print(_problem, file=sys.stderr)
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


# --set-threads and --set-resources against the rules just defined (deamoe.snakemake_args)
if _problem := resource_override_problem(workflow):
    print(_problem, file=sys.stderr)
    sys.exit(1)


rule all:
    default_target: True
    input:
        rules.report.output,
