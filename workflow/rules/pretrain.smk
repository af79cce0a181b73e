# Training runs: Table 4's six ablation variants and the DeaMoE-vs-baseline pre-training pair.
# One rule, one command; the run name picks the variant.

wildcard_constraints:
    run="ablation-no[1-6]|pretrain-(baseline|deamoe)",
    model="baseline|deamoe",


def _run_section(wildcards):
    return section("ablation" if wildcards.run.startswith("ablation") else "pretrain")


rule train:
    input:
        rules.data.output,
    output:
        summary="results/train/{run}/summary.json",
        log_csv="results/train/{run}/log.csv",
        checkpoint=directory("results/train/{run}/checkpoint"),
    params:
        config=RESOLVED_CONFIG,
        model=section("model"),
        train=section("train"),
        run_section=_run_section,
    conda:
        "../../envs/train.yaml"
    log:
        "logs/train/{run}.log",
    # tiny: two 1-thread runs side by side on a 2-core laptop; the profiles raise it
    threads: 1
    resources:
        gpu=0,  # the GPU/SLURM profiles set this to match train.nproc_per_node
    # An interrupted run resumes from its last periodic checkpoint (kept beside, not in, the
    # declared outputs, so Snakemake's cleanup of incomplete outputs leaves it).  With
    # train.nproc_per_node > 1 the command itself re-launches under torchrun (FSDP2).
    shell:
        "{DEAMOE} train --config {params.config} --run {wildcards.run}"
        " --data results/data --out results/train/{wildcards.run} > {log} 2>&1"


rule pretrain:
    input:
        expand("results/train/pretrain-{model}/summary.json", model=PRETRAIN_MODELS),
    output:
        "results/pretrain/summary.csv",
    params:
        config=RESOLVED_CONFIG,
        pretrain=section("pretrain"),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/pretrain/summary.log",
    threads: 1
    shell:
        "{DEAMOE} pretrain --config {params.config} --runs results/train --out {output} > {log} 2>&1"
