# Table 4: mean training loss over the last N steps of variants No.1-No.6, the paper's beside.


rule ablation:
    input:
        expand("results/train/{run}/summary.json", run=ABLATION_RUNS),
    output:
        "results/ablation/summary.csv",
    params:
        ablation=section("ablation"),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/ablation/summary.log",
    threads: 1
    shell:
        "{DEAMOE} ablation --config {RESOLVED_CONFIG} --runs results/train --out {output} > {log} 2>&1"
