# Table 1 (budget-matched DeaMoE configurations) and Figure 2 (expected loaded expert weights per
# decoding step).  Pure arithmetic and sampling on the CPU: seconds.


rule table1:
    output:
        "results/analysis/table1.csv",
    params:
        analysis=section("analysis"),
    conda:
        "../../envs/analysis.yaml"
    log:
        "logs/analysis/table1.log",
    threads: 1
    shell:
        "{DEAMOE} table1 --config {RESOLVED_CONFIG} --out {output} > {log} 2>&1"


rule loading:
    output:
        "results/analysis/loading.csv",
    params:
        analysis=section("analysis"),
    conda:
        "../../envs/analysis.yaml"
    log:
        "logs/analysis/loading.log",
    threads: 1
    shell:
        "{DEAMOE} loading --config {RESOLVED_CONFIG} --out {output} > {log} 2>&1"
