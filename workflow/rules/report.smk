# Tables 1-4 and Figures 2-5 under reports/ (markdown + CSV, PNG + SVG), the paper's values beside
# the reproduced ones.  Reads only results/ and reports/measured/; `snakemake --report
# reports/report.html` bundles these outputs with the captions in workflow/report/.
#
# Every file below is always written: a stage that did not produce numbers (e.g. the
# microbenchmarks without a CUDA GPU) appears as "not run" with its reason.

# (file stem, category, label shown in the HTML report); captions: workflow/report/<stem>.rst
REPORT_TABLES = [
    ("table1", "Table 1 - budget", "Table 1: budget-matched configurations"),
    ("figure2", "Figure 2 - weight loading", "Figure 2 data: loaded-weight ratio"),
    ("figure3", "Figure 3 - serving", "Figure 3 data: TPOT and speedup"),
    ("figure3_slo", "Figure 3 - serving", "Figure 3: throughput under a TPOT budget"),
    ("figure3_slo_decode", "Figure 3 - serving", "Figure 3 at GPU scale: decode-step budget"),
    ("figure4_5", "Figures 4-5 - decode kernels", "Figures 4/5 data: per-layer speedups"),
    ("figure4_5_fp8", "Figures 4-5 - decode kernels", "Figures 4/5 in FP8: per-layer speedups"),
    ("decode_tpot", "Figures 4-5 - decode kernels", "Model-level decode TPOT"),
    ("vllm_peer", "Figures 4-5 - decode kernels", "vLLM's kernel on the same GPU"),
    ("table2", "Table 2 - downstream accuracy", "Table 2: downstream accuracy"),
    ("table3", "Table 3 - perplexity", "Table 3: perplexity"),
    ("table4", "Table 4 - ablation", "Table 4: ablation losses"),
    ("pretrain", "Pre-training", "Pre-training summary"),
    ("pretrain_gpu", "Quality at GPU scale", "Pre-training ladder: held-out loss over seeds"),
    ("table2_gpu", "Quality at GPU scale", "Table 2 at GPU scale"),
    ("table3_gpu", "Quality at GPU scale", "Table 3 at GPU scale"),
    ("table4_gpu", "Quality at GPU scale", "Table 4 at GPU scale"),
    ("tokens_axis", "Quality at GPU scale", "Tokens axis: gap against training length"),
    ("train_throughput", "Pre-training", "Training throughput on one GPU"),
]
REPORT_FIGURES = [
    ("figure2_loading", "Figure 2 - weight loading", "figure2", "Figure 2"),
    ("figure3_tpot", "Figure 3 - serving", "figure3", "Figure 3"),
    ("figure3_slo_decode", "Figure 3 - serving", "figure3_slo_decode", "Figure 3 at GPU scale"),
    ("figure4_5_microbench", "Figures 4-5 - decode kernels", "figure4_5", "Figures 4/5"),
    ("figure4_5_fp8", "Figures 4-5 - decode kernels", "figure4_5_fp8", "Figures 4/5 in FP8"),
    ("table4_loss_curves", "Table 4 - ablation", "table4_loss_curves", "Ablation loss curves"),
    ("table4_gpu_loss_curves", "Quality at GPU scale", "table4_gpu_loss_curves", "Table 4 at GPU scale: loss curves"),
    ("pretrain_loss_curves", "Pre-training", "pretrain_loss_curves", "Pre-training loss curves"),
    ("quality_gap", "Quality at GPU scale", "quality_gap", "Held-out loss gap against size"),
    ("quality_loss_curves", "Quality at GPU scale", "quality_loss_curves", "Loss curves per pair"),
    ("tokens_axis_gap", "Quality at GPU scale", "tokens_axis_gap", "Held-out gap against training length"),
    ("tokens_axis_loss", "Quality at GPU scale", "tokens_axis_loss", "Held-out loss against training tokens"),
]


def _shown(path, **flags):
    """`path` flagged for the HTML report (`snakemake --report`) when it exists: a report built
    before the report rule ran, or after a partial run, shows what there is (the front page at
    least) instead of stopping at the first missing file."""
    return report(path, **flags) if Path(path).is_file() else path


def _report_outputs():
    """Every file the report command writes.  The HTML report (`--report`) shows each table's
    HTML page (table, notes, scale and hardware) and the PNG figures inline; the markdown, CSV and
    SVG copies are for reading in the repository, for scripts and for papers."""
    # One label per entry: with two labels, Snakemake's report turns a label that splits a
    # category's entries in halves into a toggle, which breaks categories of one table + one figure.
    out = {}
    for stem, category, label in REPORT_TABLES:
        out[f"{stem}_csv"] = f"reports/tables/{stem}.csv"
        out[f"{stem}_html"] = _shown(
            f"reports/tables/{stem}.html",
            caption=f"../report/{stem}.rst",
            category=category,
            labels={"artifact": label},
        )
        out[f"{stem}_md"] = f"reports/tables/{stem}.md"
    for stem, category, caption, label in REPORT_FIGURES:
        out[f"{stem}_png"] = _shown(
            f"reports/figures/{stem}.png",
            caption=f"../report/{caption}.rst",
            category=category,
            labels={"artifact": label},
        )
        out[f"{stem}_svg"] = f"reports/figures/{stem}.svg"
    out["index"] = "reports/index.md"
    out["front_page"] = FRONT_PAGE  # the HTML report's front page (Snakefile: `report:`)
    out["provenance"] = "reports/provenance.csv"
    out["provenance_html"] = _shown(
        "reports/provenance.html",
        caption="../report/provenance.rst",
        category="Provenance",
        labels={"artifact": "Scale and hardware of every source file"},
    )
    return out


MEASURED = "reports/measured"  # committed GPU tables, one folder per GPU


def _measured_inputs(wildcards):
    """Committed GPU tables, when present (they are what the report shows without a GPU)."""
    folder = Path(MEASURED) / section("report").get("measured_gpu", "h200")
    return sorted(str(p) for p in [*folder.glob("*.csv"), *folder.glob("quality/*/*.csv"),
                                   *folder.glob("quality/*/*steps/*.csv")])


rule report:
    input:
        description="workflow/report/workflow.rst",
        table1="results/analysis/table1.csv",
        loading="results/analysis/loading.csv",
        ablation=rules.ablation.output.summary,
        ablation_curves=rules.ablation.output.curves,
        pretrain=rules.pretrain.output.summary,
        pretrain_curves=rules.pretrain.output.curves,
        downstream="results/eval/downstream.csv",
        perplexity="results/eval/perplexity.csv",
        tpot="results/serve/tpot.csv",
        slo="results/serve/slo.csv",
        microbench="results/microbench",
        measured=_measured_inputs,
        quality=expand("results/quality/{size}/runs.csv", size=SIZES),
        tokens_axis=[f"results/quality/{z}/{n}steps/runs.csv" for z in SIZES for n in _runs.axis_lengths(_TRAIN, z)],
    output:
        **_report_outputs(),
    params:
        report=section("report"),
        results=lambda wc, input: str(Path(input.table1).parents[1]),
        out=lambda wc, output: str(Path(output.index).parent),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/report/report.log",
    threads: 1
    shell:
        "{DEAMOE} report --config {RESOLVED_CONFIG} --results {params.results}"
        " --measured {MEASURED} --out {params.out} --description {input.description}"
        " > {log} 2>&1"


import signal

_snakemake_create_report = workflow.create_report


def _report_as_an_output(report_plugin, report_settings, global_report_settings):
    """`snakemake --report PATH`: Snakemake's reporter opens PATH for writing as it is, so a user's
    file there was replaced without a word, a missing folder or a folder at PATH ended in a
    traceback, and a stop while writing left half a report.  PATH is an output as the commands'
    are (deamoe.io): refused in one line unless absent or written by this workflow, its folder
    made, the report written under a temporary name beside it and renamed when whole."""
    from deamoe.io import atomic_path
    from deamoe.ownership import OutputPathError

    path = getattr(report_settings, "path", None)
    if path is None:
        return _snakemake_create_report(report_plugin, report_settings, global_report_settings)
    if Path(path).suffix not in (".html", ".zip"):
        # (Snakemake's own error, raised under this wrapper, named report.smk as its origin)
        config_stop([f"--report {path}: not a report file name; give a path ending in .html or .zip "
                     "(e.g. reports/report.html)"], prefix="report")
    def stop(signum, frame):  # SIGTERM unwinds as Ctrl-C does: the temporary report removed
        raise _ReportStopped()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with atomic_path(path) as tmp:  # the same file name: a .zip's folder inside is named by it
            report_settings.path = tmp
            try:
                _snakemake_create_report(report_plugin, report_settings, global_report_settings)
            finally:
                report_settings.path = path
            if not tmp.is_file():
                raise WorkflowError(f"--report {path}: Snakemake wrote no report")
    except OutputPathError as exc:
        config_stop([exc], prefix="report")
    except KeyboardInterrupt as exc:  # (asyncio's traceback of it otherwise)
        how = ("terminated", 143) if isinstance(exc, _ReportStopped) else ("interrupted", 130)
        print(f"{how[0]}: snakemake --report {path}; no report written", file=sys.stderr)
        sys.exit(how[1])
    finally:
        signal.signal(signal.SIGTERM, previous)


class _ReportStopped(KeyboardInterrupt):
    """SIGTERM while the HTML report is written."""


workflow.create_report = _report_as_an_output
