# Tables 1-4 and Figures 2-5 under reports/ (markdown + CSV, PNG + SVG), the paper's values beside
# the reproduced ones.  Reads only results/ and reports/measured/; `snakemake --report
# reports/report.html` bundles these outputs with the captions in workflow/report/.
#
# Every file below is always written: a stage that did not produce numbers (e.g. the
# microbenchmarks without a CUDA GPU) appears as "not run" with its reason.

# (table stem, category, caption) -- one caption per artifact in workflow/report/<stem>.rst
REPORT_TABLES = [
    ("table1", "Table 1 - budget"),
    ("figure2", "Figure 2 - weight loading"),
    ("figure3", "Figure 3 - serving"),
    ("figure3_slo", "Figure 3 - serving"),
    ("figure4_5", "Figures 4-5 - decode kernels"),
    ("decode_tpot", "Figures 4-5 - decode kernels"),
    ("table2", "Table 2 - downstream accuracy"),
    ("table3", "Table 3 - perplexity"),
    ("table4", "Table 4 - ablation"),
    ("pretrain", "Pre-training"),
]
REPORT_FIGURES = [
    ("figure2_loading", "Figure 2 - weight loading", "figure2"),
    ("figure3_tpot", "Figure 3 - serving", "figure3"),
    ("figure4_5_microbench", "Figures 4-5 - decode kernels", "figure4_5"),
    ("table4_loss_curves", "Table 4 - ablation", "table4_loss_curves"),
    ("pretrain_loss_curves", "Pre-training", "pretrain_loss_curves"),
]


def _report_outputs():
    out = {}
    for stem, category in REPORT_TABLES:
        for ext in ("md", "csv"):
            out[f"{stem}_{ext}"] = report(
                f"reports/tables/{stem}.{ext}",
                caption=f"../report/{stem}.rst",
                category=category,
                labels={"artifact": stem, "file": ext},
            )
    for stem, category, caption in REPORT_FIGURES:
        for ext in ("png", "svg"):
            out[f"{stem}_{ext}"] = report(
                f"reports/figures/{stem}.{ext}",
                caption=f"../report/{caption}.rst",
                category=category,
                labels={"artifact": stem, "file": ext},
            )
    out["index"] = "reports/index.md"
    out["provenance"] = "reports/provenance.csv"
    return out


def _measured_inputs(wildcards):
    """Committed GPU tables, when present (they are what the report shows without a GPU)."""
    folder = Path("reports/measured") / section("report").get("measured_gpu", "h200")
    return sorted(str(p) for p in folder.glob("*.csv"))


rule report:
    input:
        table1="results/analysis/table1.csv",
        loading="results/analysis/loading.csv",
        ablation="results/ablation/summary.csv",
        pretrain="results/pretrain/summary.csv",
        downstream="results/eval/downstream.csv",
        perplexity="results/eval/perplexity.csv",
        tpot="results/serve/tpot.csv",
        slo="results/serve/slo.csv",
        microbench="results/microbench",
        measured=_measured_inputs,
    output:
        **_report_outputs(),
    params:
        config=RESOLVED_CONFIG,
        report=section("report"),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/report/report.log",
    threads: 1
    shell:
        "{DEAMOE} report --config {params.config} --results results"
        " --measured reports/measured --out reports > {log} 2>&1"
