# Quality at one size of the ladder: every run's training summary joined with its perplexities
# and (for eval.seeds) downstream accuracies, one row per run with provenance; loss curves and
# the long per-task rows beside; and the same pairs at each further length of the size's tokens
# axis.  `quality_<size>` (all of a size's lengths) and `ablation_seeds` are the targets; one
# length's folder is the unit of a GPU call (docs/quality-ladder.md).


rule quality:
    input:
        train=configured(lambda wc: expand("results/train/{run}/summary.json",
                                           run=trained(_runs.pretrain_run_names(_TRAIN, [wc.size])))),
        evals=configured(lambda wc: expand("results/eval/{run}/lm_eval.json",
                                           run=trained(_runs.pretrain_run_names(_TRAIN, [wc.size])))),
    output:
        runs="results/quality/{size}/runs.csv",
        curves="results/quality/{size}/curves.csv",
        evals="results/quality/{size}/evals.csv",
    params:
        pretrain=section("pretrain"),
        last_n=LAST_N,
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


# One length of a size's tokens axis (pretrain.sizes.<size>.lengths): its pairs' held-out losses
# and curves, one folder per length, so that each length can be one GPU call.
rule quality_length:
    input:
        train=configured(lambda wc: expand(
            "results/train/{run}/summary.json",
            run=trained(_runs.pretrain_run_names(_TRAIN, [wc.size], int(wc.steps))))),
    output:
        runs="results/quality/{size}/{steps}steps/runs.csv",
        curves="results/quality/{size}/{steps}steps/curves.csv",
    params:
        pretrain=section("pretrain"),
        last_n=LAST_N,
        runs=lambda wc, input: str(Path(input.train[0]).parents[1]),
    conda:
        "../../envs/train.yaml"
    wildcard_constraints:
        steps=r"\d+",
    log:
        "logs/quality/{size}-{steps}steps.log",
    threads: 1
    shell:
        "{DEAMOE} pretrain --config {RESOLVED_CONFIG} --runs {params.runs} --size {wildcards.size}"
        " --steps {wildcards.steps} --out {output.runs} > {log} 2>&1"


for _size in SIZES:

    rule:
        name:
            f"quality_{_size}"
        input:
            f"results/quality/{_size}/runs.csv",
            [f"results/quality/{_size}/{n}steps/runs.csv" for n in _runs.axis_lengths(_TRAIN, _size)],
        localrule: True


rule ablation_seeds:
    input:
        "results/ablation/summary.csv",
    localrule: True
