# Corpus -> tokenizer + memory-mapped token shards with a held-out split (src/deamoe/train/data).

from deamoe.train.data import corpus_files as _corpus_glob


def _bundled_corpus() -> str:
    """The bundled corpus as the working directory sees it: relative where it is the checkout's
    (so that a moved or copied checkout keeps its results: Snakemake reruns a job whose set of
    input paths changed), else the Snakefile's copy by its absolute path."""
    rel, shipped = Path("data/corpus/gutenberg-slice.txt.gz"), Path(workflow.basedir) / "data" / "corpus" / "gutenberg-slice.txt.gz"
    return str(rel) if rel.is_file() and rel.samefile(shipped) else str(shipped)


def _corpus_files(wildcards):
    """The local text the data stage reads, as inputs: a missing file is named before any job
    runs, and a changed corpus reruns the data stage (and everything trained on it)."""
    data = section("data")
    source = data.get("source", "bundled")
    if source == "bundled":
        return [_bundled_corpus()]
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
