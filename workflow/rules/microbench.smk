# Figures 4/5: per-layer and model-level decode microbenchmarks of the Triton kernels.  Needs a
# CUDA GPU; on any other machine the command writes results/microbench/status.json
# ("not run", "no CUDA GPU") and exits 0, and the report shows the committed
# reports/measured/<gpu>/ tables instead.  Like serving, it owns the machine while it runs.


rule microbench:
    output:
        directory("results/microbench"),
    params:
        microbench=section("microbench"),
    conda:
        "../../envs/microbench.yaml"
    log:
        "logs/microbench/microbench.log",
    benchmark:
        "logs/microbench/microbench.benchmark.tsv"
    threads: 1024  # more than any machine: Snakemake caps it at --cores, so the job runs alone
    resources:
        gpu=0,
    shell:
        "{DEAMOE} microbench --config {RESOLVED_CONFIG} --out {output} > {log} 2>&1"
