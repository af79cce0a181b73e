# Training runs: Table 4's six ablation variants x seeds, and the pre-training ladder (sizes x
# {baseline, deamoe} x seeds x lengths).  One rule, one command; the run name picks size, model,
# seed and length.

import dataclasses

from deamoe.errors import ConfigError as _ConfigError
from deamoe.train import runs as _runs
from deamoe.settings import load_settings as _load_settings

# The ladder resolved once at parse time: a bad size, an unmatched pair or a missing key stops
# Snakemake with one line naming the key, before any job runs.
try:
    _TRAIN = _load_settings(doc=RESOLVED)
    SIZES = {name: _runs.size(_TRAIN, name) for name in _TRAIN.pretrain.sizes}
except _ConfigError as _exc:
    config_stop([_exc])
PRETRAIN_RUNS = _runs.pretrain_run_names(_TRAIN)


def trained(names):
    """The runs that train `names`: a run whose recipe equals an earlier one's is that run
    (deamoe.train.runs.trained_as), so it is trained, evaluated and read once."""
    return list(dict.fromkeys(_runs.trained_as(_TRAIN, r) for r in names))


ABLATION_RUNS = _runs.ablation_run_names(_TRAIN)
ABLATION_SIZE = _runs.ablation_size(_TRAIN)
# The checkpoints served (Figure 3) and shown first: the first size's first seed
SERVED_RUN = {m: f"pretrain-{next(iter(SIZES))}-{m}-s{_runs.seeds(_TRAIN, 'pretrain')[0]}"
              for m in PRETRAIN_MODELS}

# A GPU is GPU_SLOTS `gpu_slots` (the gpu profile declares that many per GPU): a run of a size with
# runs_per_gpu N takes GPU_SLOTS / N of them, so small runs share the GPU and large ones own it.
GPU_SLOTS = 12


def gpu_slots(wildcards):
    r = _runs.parse_run(wildcards.run)
    per_gpu = SIZES[r.get("size", ABLATION_SIZE)].runs_per_gpu
    return GPU_SLOTS // per_gpu  # exact: the schema allows only divisors of GPU_SLOTS


wildcard_constraints:
    run=r"ablation-no[1-6]-s\d+|pretrain-[a-z0-9]+-(baseline|deamoe)-s\d+(-\d+steps)?",
    model="baseline|deamoe",
    size="[a-z0-9]+",


def _run_recipe(wildcards):
    """A training job's own param: what its weights are a function of beside the `model` and
    `train` sections (its size's decoder and FFN, steps, lr, seed: deamoe.train.runs.run_spec).
    Not the whole `ablation` or `pretrain` section: a seed or size added there, ablation.last_n
    (read by the summary tables, not the trainer's steps) or pretrain.max_budget_deviation (a
    check) would retrain, then re-evaluate and re-serve, every run of the section unchanged."""
    spec = dataclasses.asdict(_runs.run_spec(_TRAIN, wildcards.run))
    spec.pop("paper")  # the paper's numbers beside the run: constants, no part of its training
    return spec


# The tables over training runs average each run's last ablation.last_n steps (Table 4 and the
# pre-training summary alike): that value is a param of each, so changing it reruns them.
LAST_N = section("ablation").get("last_n")


@configured
def _configured_run(wildcards):
    """No file: the run named by a target must be one the config defines (its size, seed and
    length), checked while the DAG is built -- else the job would fail after the data stage ran."""
    _runs.run_spec(_TRAIN, wildcards.run)
    return []


# the resume state (deamoe.train.trainer), outside the declared outputs so that a killed run resumes
BESIDE_OUTPUTS["train"] = lambda job: [str(Path(job.output.summary).parent / "state" / "resume.pt")]


rule train:
    input:
        rules.data.output,
        _configured_run,
    output:
        summary="results/train/{run}/summary.json",
        log_csv="results/train/{run}/log.csv",
        checkpoint=directory("results/train/{run}/checkpoint"),
    params:
        model=section("model"),
        train=section("train"),
        recipe=_run_recipe,
        data=folder(of="input"),
        out=folder(),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/train/{run}.log",
    benchmark:
        "logs/train/{run}.benchmark.tsv"
    # tiny: two 1-thread runs side by side on a 2-core laptop; the profiles raise it
    threads: 1
    resources:
        gpu=0,  # the SLURM profile sets this to match train.nproc_per_node
        gpu_slots=gpu_slots,
    # An interrupted run resumes from its last periodic checkpoint (kept beside, not in, the
    # declared outputs, so Snakemake's cleanup of incomplete outputs leaves it).  With
    # train.nproc_per_node > 1 the command itself re-launches under torchrun (FSDP2).
    shell:
        "{DEAMOE} train --config {RESOLVED_CONFIG} --run {wildcards.run}"
        " --data {params.data} --out {params.out} > {log} 2>&1"


rule pretrain:
    input:
        expand("results/train/{run}/summary.json", run=trained(PRETRAIN_RUNS)),
    output:
        summary="results/pretrain/summary.csv",
        curves="results/pretrain/curves.csv",  # written beside it; the report draws them
    params:
        pretrain=section("pretrain"),
        last_n=LAST_N,
        runs=folder(2, of="input"),
    conda:
        "../../envs/train.yaml"
    log:
        "logs/pretrain/summary.log",
    threads: 1
    shell:
        "{DEAMOE} pretrain --config {RESOLVED_CONFIG} --runs {params.runs} --out {output.summary} > {log} 2>&1"
