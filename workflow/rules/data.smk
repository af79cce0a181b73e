# Corpus -> tokenizer + memory-mapped token shards with a held-out split (src/deamoe/train/data).

from deamoe.train.data import corpus_files as _corpus_glob


def _corpus_files(wildcards):
    """The local text the data stage reads, as inputs: a missing file is named before any job
    runs, and a changed corpus reruns the data stage (and everything trained on it)."""
    data = section("data")
    source = data.get("source", "bundled")
    if source == "bundled":
        return [str(Path(workflow.basedir) / "data" / "corpus" / "gutenberg-slice.txt.gz")]
    if source == "files":  # each entry matches a regular file: checked with the config (common.smk)
        return [str(p) for p in _corpus_glob(data.get("files", []))]
    return []  # online sources (e.g. redpajama) are fetched by the command itself


rule data:
    input:
        _corpus_files,
    output:
        train="results/data/train.bin",
        val="results/data/val.bin",
        meta="results/data/meta.json",
        tokenizer=directory("results/data/tokenizer"),
    params:
        data=section("data"),
        out=folder(),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/data/data.log",
    # the tokenizer library's thread pool (BPE training, batch encoding of the books)
    threads: 1
    shell:
        "RAYON_NUM_THREADS={threads} RAYON_RS_NUM_CPUS={threads}"
        " {DEAMOE} data --config {RESOLVED_CONFIG} --out {params.out} > {log} 2>&1"
