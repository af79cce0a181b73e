# Tables 2 and 3: lm-evaluation-harness on the pre-trained checkpoints (offline, shipped data).


def _eval_data(wildcards):
    """The shipped evaluation data (offline mode): a missing folder is named before any job runs."""
    ev = section("eval")
    return [] if ev.get("online") else [ev.get("data_dir", "data/eval")]


rule eval:
    input:
        checkpoint="results/train/pretrain-{model}/checkpoint",
        data=_eval_data,
    output:
        "results/eval/{model}/lm_eval.json",
    params:
        config=RESOLVED_CONFIG,
        eval=section("eval"),
    conda:
        "../../envs/eval.yaml"
    log:
        "logs/eval/{model}.log",
    threads: 1
    resources:
        gpu=0,
    shell:
        "{DEAMOE} eval --config {params.config} --checkpoint {input.checkpoint}"
        " --model {wildcards.model} --out results/eval/{wildcards.model} > {log} 2>&1"


rule eval_tables:
    input:
        expand("results/eval/{model}/lm_eval.json", model=PRETRAIN_MODELS),
    output:
        downstream="results/eval/downstream.csv",
        perplexity="results/eval/perplexity.csv",
    params:
        config=RESOLVED_CONFIG,
        eval=section("eval"),
    conda:
        "../../envs/eval.yaml"
    log:
        "logs/eval/tables.log",
    threads: 1
    shell:
        "{DEAMOE} eval-tables --config {params.config} --in results/eval --out results/eval > {log} 2>&1"
