"""`python -m deamoe report`: tables and figures from results/ and reports/measured/."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("report", help="build the tables (md + csv) and figures (png + svg) under reports/",
                       description=__doc__)
    p.add_argument("--config", required=True, help="pipeline config YAML (reads its `report` section)")
    p.add_argument("--results", default="results", help="the pipeline's results folder")
    p.add_argument("--measured", default="reports/measured",
                   help="committed measurements (one folder per GPU, e.g. h200/)")
    p.add_argument("--out", default="reports", help="output folder")
    p.add_argument("--description", help="reStructuredText put under the headline in "
                   "OUT/workflow.rst, the HTML report's front page (e.g. "
                   "workflow/report/workflow.rst)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from deamoe.checks import measured_gpu_problem
    from deamoe.errors import ConfigError
    from deamoe.io import check_apart, check_outputs, folder_lock
    from deamoe.readers import input_folder, read_text
    from deamoe.report.build import ReportSettings, report_outputs, write_report
    from deamoe.settings import read_config

    cfg = read_config(args.config)
    settings = ReportSettings.from_config(cfg)
    for flag, folder in (("--results", args.results), ("--measured", args.measured)):
        input_folder(folder, flag)  # a mistyped folder would give a report of "not run" rows
    description = read_text(args.description) if args.description else ""
    check_apart([("--out", args.out)], [("--results", args.results), ("--measured", args.measured)])
    check_outputs(files=report_outputs(Path(args.out)), folders=[args.out])
    if problem := measured_gpu_problem(settings.measured_gpu, args.measured):  # "not run" rows too
        raise ConfigError(f"config file {args.config}: {problem}")
    with folder_lock(args.out, what="another `python -m deamoe report`"):
        written = write_report(Path(args.results), Path(args.measured), Path(args.out), settings,
                               profile=cfg.get("profile"), description=description)
    print(f"report: wrote {len(written)} files under {args.out}")
    return 0
