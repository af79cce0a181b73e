# Corpus -> tokenizer + memory-mapped token shards with a held-out split (src/deamoe/train/data).


rule data:
    output:
        train="results/data/train.bin",
        val="results/data/val.bin",
        meta="results/data/meta.json",
    params:
        config=RESOLVED_CONFIG,
        data=section("data"),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/data/data.log",
    threads: 1
    shell:
        "{DEAMOE} data --config {params.config} --out results/data > {log} 2>&1"
