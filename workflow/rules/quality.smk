# Quality at one size of the ladder: every run's training summary joined with its perplexities
# and (for eval.seeds) downstream accuracies, one row per run with provenance; loss curves and
# the long per-task rows beside.  `quality_<size>` and `ablation_seeds` are the targets of one
# GPU call each (README: "Quality at GPU scale").


rule quality:
    input:
        train=lambda wc: expand("results/train/{run}/summary.json",
                                run=_runs.pretrain_run_names(_TRAIN, [wc.size])),
        evals=lambda wc: expand("results/eval/{run}/lm_eval.json",
                                run=_runs.pretrain_run_names(_TRAIN, [wc.size])),
    output:
        runs="results/quality/{size}/runs.csv",
        curves="results/quality/{size}/curves.csv",
        evals="results/quality/{size}/evals.csv",
    params:
        pretrain=section("pretrain"),
        eval=section("eval"),
        runs=lambda wc, input: str(Path(input.train[0]).parents[1]),
        evals=lambda wc, input: str(Path(input.evals[0]).parents[1]),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/quality/{size}.log",
    threads: 1
    shell:
        "{DEAMOE} pretrain --config {RESOLVED_CONFIG} --runs {params.runs} --eval {params.evals}"
        " --size {wildcards.size} --out {output.runs} > {log} 2>&1"


for _size in SIZES:

    rule:
        name:
            f"quality_{_size}"
        input:
            f"results/quality/{_size}/runs.csv",
        localrule: True


rule ablation_seeds:
    input:
        "results/ablation/summary.csv",
    localrule: True
