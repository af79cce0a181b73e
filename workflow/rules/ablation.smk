# Table 4: mean training loss over the last N steps of variants No.1-No.6, the paper's beside.


rule ablation:
    input:
        # a variant identical to a pre-training run (No.1 on the same schedule) is read from it
        expand("results/train/{run}/summary.json", run=[_runs.trained_as(_TRAIN, r) for r in ABLATION_RUNS]),
    output:
        summary="results/ablation/summary.csv",
        curves="results/ablation/curves.csv",  # written beside it; the report draws them
    params:
        ablation=section("ablation"),
        runs=folder(2, of="input"),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/ablation/summary.log",
    threads: 1
    shell:
        "{DEAMOE} ablation --config {RESOLVED_CONFIG} --runs {params.runs} --out {output.summary} > {log} 2>&1"
