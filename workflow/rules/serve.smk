# Figure 3: each pre-trained checkpoint served by vLLM (CPU backend by default) through the
# project's plugin, driven at each configured concurrency.  A serving benchmark owns the machine:
# It takes all cores (threads above any --cores, which Snakemake caps), so no other job runs
# beside it and skews its timings.

# --sdm conda: vLLM's CPU build for the tiny profile, its GPU build (own pinned torch) otherwise
SERVE_ENV = "../../envs/serve-cpu.yaml" if RESOLVED.get("profile", "tiny") == "tiny" \
    else "../../envs/serve-gpu.yaml"


rule serve:
    input:
        checkpoint=lambda wc: f"results/train/{SERVED_RUN[wc.model]}/checkpoint",
    output:
        directory("results/serve/{model}"),  # c<N>.json per concurrency, written by the command
    params:
        serve=section("serve"),
    conda:
        SERVE_ENV
    # the server's and the benchmark client's logs too (the command names the client's after the
    # server's): declared, a user's file at either is refused before any job, not by this job
    log:
        main="logs/serve/{model}.log",
        server="logs/serve/{model}.server.log",
        client="logs/serve/{model}.client.log",
    benchmark:
        "logs/serve/{model}.benchmark.tsv"
    threads: 1024  # more than any machine: Snakemake caps it at --cores, so the job runs alone
    resources:
        gpu=0,
    shell:
        "{DEAMOE} serve --config {RESOLVED_CONFIG} --checkpoint {input.checkpoint}"
        " --model {wildcards.model} --out {output} --log {log.server} > {log.main} 2>&1"


rule serve_tables:
    input:
        expand("results/serve/{model}", model=PRETRAIN_MODELS),
    output:
        tpot="results/serve/tpot.csv",
        slo="results/serve/slo.csv",
    params:
        serve=section("serve"),
        runs=folder(of="input"),
        out=folder(),
    conda:
        SERVE_ENV
    log:
        "logs/serve/tables.log",
    threads: 1
    shell:
        "{DEAMOE} serve-tables --config {RESOLVED_CONFIG} --in {params.runs} --out {params.out} > {log} 2>&1"
