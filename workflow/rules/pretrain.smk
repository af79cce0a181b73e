# Training runs: Table 4's six ablation variants and the DeaMoE-vs-baseline pre-training pair.
# One rule, one command; the run name picks the variant.  With resources.gpus > 1 (the GPU and
# SLURM profiles) the same command runs under torchrun (FSDP2 inside the trainer).

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
    log:
        "logs/train/{run}.log",
    threads: 2
    resources:
        gpus=0,
    # An interrupted run resumes from its last periodic checkpoint (kept beside, not in, the
    # declared outputs, so Snakemake's cleanup of incomplete outputs does not delete it).
    shell:
        "if [ {resources.gpus} -gt 1 ]; then"
        "  launch='{PY} -m torch.distributed.run --standalone --nproc_per_node {resources.gpus}';"
        " else launch='{PY}'; fi;"
        " $launch -m deamoe train --config {params.config} --run {wildcards.run}"
        " --data results/data --out results/train/{wildcards.run} > {log} 2>&1"


rule pretrain:
    input:
        expand("results/train/pretrain-{model}/summary.json", model=PRETRAIN_MODELS),
    output:
        "results/pretrain/summary.csv",
    params:
        config=RESOLVED_CONFIG,
        pretrain=section("pretrain"),
    log:
        "logs/pretrain/summary.log",
    threads: 1
    shell:
        "{DEAMOE} pretrain --config {params.config} --runs results/train --out {output} > {log} 2>&1"
