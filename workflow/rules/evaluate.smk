# Tables 2 and 3: lm-evaluation-harness on the pre-trained checkpoints (offline, shipped data).
# Every run of the ladder at its size's own length gets the perplexity corpora (the further
# lengths of a tokens axis are compared by their held-out loss); the seeds in eval.seeds (all when
# empty) get the downstream tasks too.


def _eval_data(wildcards):
    """The shipped evaluation data (offline mode): a missing folder is named before any job runs."""
    ev = section("eval")
    return [] if ev.get("online") else [ev.get("data_dir", "data/eval")]


def _eval_args(wildcards):
    r = _runs.parse_run(wildcards.run)
    chosen = section("eval").get("seeds") or []
    only_ppl = bool(chosen) and r["seed"] not in chosen
    return f"--model {r['model']}" + (" --perplexity-only" if only_ppl else "")


# An evaluation's params: the `eval` section but `seeds`, which decides only whether this run
# gets the downstream tasks (its `args`): a seed added there re-evaluates that seed's runs alone,
# not every run of the ladder.
EVAL_RUN_SETTINGS = {k: v for k, v in section("eval").items() if k != "seeds"}


rule eval:
    input:
        checkpoint="results/train/{run}/checkpoint",
        data=_eval_data,
    output:
        "results/eval/{run}/lm_eval.json",
    params:
        eval=EVAL_RUN_SETTINGS,
        args=_eval_args,
        out=folder(),
    conda:
        "../../envs/eval.yaml"
    wildcard_constraints:
        run=r"pretrain-[a-z0-9]+-(baseline|deamoe)-s\d+",
    log:
        "logs/eval/{run}.log",
    benchmark:
        "logs/eval/{run}.benchmark.tsv"
    threads: 1
    resources:
        gpu=0,
        gpu_slots=gpu_slots,
    shell:
        "{DEAMOE} eval --config {RESOLVED_CONFIG} --checkpoint {input.checkpoint}"
        " {params.args} --out {params.out} > {log} 2>&1"


rule eval_tables:
    input:
        expand("results/eval/{run}/lm_eval.json", run=trained(PRETRAIN_RUNS)),
    output:
        downstream="results/eval/downstream.csv",
        perplexity="results/eval/perplexity.csv",
    params:
        eval=section("eval"),
        runs=folder(2, of="input"),
        out=folder(),
    conda:
        "../../envs/eval.yaml"
    log:
        "logs/eval/tables.log",
    threads: 1
    shell:
        "{DEAMOE} eval-tables --config {RESOLVED_CONFIG} --in {params.runs} --out {params.out} > {log} 2>&1"
