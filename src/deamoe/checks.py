"""The one check of the whole pipeline config: every bad value, one line each, naming the keys.

`config_problems(doc)` takes the pipeline config as a dict (config.yaml + profile + overrides) and
returns one line per problem: a section that does not parse (wrong type, out-of-range or unknown
value: its first problem), and values that are each valid alone but conflict with another
(k_dept > n_dept, a micro-batch that does not divide the batch, ...).  Only the sections present
are checked (the workflow's resolved config has all of them; a hand-written partial config leaves
the others at their defaults).  The workflow runs it when
it is parsed, after the JSON schemas, so `snakemake -n` lists every conflict before any job runs;
every command runs it when it reads its `--config` (deamoe.settings.read_config), so a command
started by hand stops the same way.  Light imports only: the Snakefile imports this module.
"""

from __future__ import annotations

from deamoe.errors import ConfigError, not_a_file


def _parsers():
    from deamoe.analysis.settings import AnalysisSettings
    from deamoe.eval.settings import parse_eval
    from deamoe.serve.settings import ServeSettings
    from deamoe.parse import from_dict
    from deamoe.train.settings import SECTIONS, parse_section

    parsers = {name: (lambda v, n=name: parse_section(n, v)) for name in SECTIONS}
    parsers["analysis"] = lambda v: from_dict(AnalysisSettings, v, "analysis")
    parsers["eval"] = parse_eval
    parsers["serve"] = lambda v: from_dict(ServeSettings, v, "serve")
    return parsers


def config_problems(doc: dict) -> list[str]:
    """Every problem of the pipeline config `doc`, one line each (empty: the config is good)."""
    from deamoe import schema

    problems, parsed, parsers = schema.top_level_problems(doc), {}, _parsers()
    # the sections given (each has a parser or a schema of its own; `profile` has neither)
    for name, value in doc.items():
        if value is None or name == "config" or (name not in parsers and schema.load(name) is None):
            continue  # absent: its defaults, which cannot conflict with what is given
        if not isinstance(value, dict) and any(p.startswith(f"{name}: ") for p in problems):
            continue  # named by the top level ("train: 5 is not of type 'object'"): not twice
        try:
            if name in parsers:
                parsed[name] = parsers[name](value)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        except (TypeError, ValueError) as exc:  # a value of a type the dataclass cannot hold
            problems.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        out_of_range = schema.section_problems(name, value)  # the schema's types and ranges
        if out_of_range:
            problems += out_of_range
            parsed.pop(name, None)
    problems += _conflicts(parsed)
    return problems


def check_config(doc: dict) -> None:
    """Raise one ConfigError listing every problem of `doc` ("; "-separated), if any."""
    problems = config_problems(doc)
    if problems:
        raise ConfigError("; ".join(problems))


def measured_gpu_problem(gpu: str | None, measured) -> str | None:
    """Why report.measured_gpu `gpu` names no folder of the committed measurements `measured`
    (another name showed every committed GPU table as "not run"), or None (none committed at all:
    every GPU table is "not run" anyway)."""
    from pathlib import Path

    measured = Path(measured)
    gpus = sorted(p.name for p in measured.iterdir() if p.is_dir()) if measured.is_dir() else []
    if gpu is None or not gpus or gpu in gpus:
        return None
    return (f"report.measured_gpu {gpu!r} names no folder of {measured}/ (there: {', '.join(gpus)}); "
            "the report shows the committed GPU tables of one of them")


def path_problems(doc: dict) -> list[str]:
    """The files and folders the config names, against the disk (relative paths: from the working
    directory), one line each: data.files (source=files), offline, eval.data_dir with the file
    of every configured task, and report.measured_gpu among the folders of reports/measured/
    (another name showed every committed GPU table as "not run").  The workflow runs it after
    `config_problems`, so a missing corpus or evaluation file is named before any job, not by a
    job after training."""
    from pathlib import Path

    from deamoe.errors import DataError
    from deamoe.ownership import COMMITTED

    # (the schema's default filled in by the workflow's validation)
    problem = measured_gpu_problem((doc.get("report") or {}).get("measured_gpu"), Path(*COMMITTED))
    problems = [problem] if problem else []
    data = doc.get("data") or {}
    if data.get("source") == "files" and data.get("files"):
        from deamoe.train.data import corpus_files

        try:
            corpus_files(data["files"])
        except DataError as exc:
            problems.append(str(exc))
    ev = doc.get("eval") or {}
    if not ev.get("online", False):
        from deamoe.eval.corpus import PERPLEXITY_FILES
        from deamoe.eval.data import DOWNSTREAM

        folder = Path(ev.get("data_dir", "data/eval"))
        if not folder.is_dir():
            problems.append(f"eval.data_dir {str(folder)!r} is not a folder "
                            f"({'a file' if folder.exists() else 'no such path'}); offline "
                            "evaluation reads its task files there (the shipped data: data/eval)")
        else:
            files = {t: DOWNSTREAM[t].file if t in DOWNSTREAM else PERPLEXITY_FILES.get(t)
                     for t in ev.get("tasks") or []}
            missing = sorted({f if not (folder / f).is_symlink() and not (folder / f).exists()
                              else f"{f} ({not_a_file(folder / f)})"  # a pipe, a link to nothing
                              for f in files.values() if f and not (folder / f).is_file()})
            if missing:
                problems.append(f"eval.data_dir {str(folder)!r} lacks {', '.join(missing)} (the "
                                "configured eval.tasks read them offline)")
    return problems


def _model_conflicts(m) -> list[str]:
    out = []
    if m.hidden_size % m.num_attention_heads:
        out.append(f"model.hidden_size={m.hidden_size} is not divisible by "
                   f"model.num_attention_heads={m.num_attention_heads}")
    elif (m.hidden_size // m.num_attention_heads) % 2:
        out.append(f"model.hidden_size={m.hidden_size} / model.num_attention_heads="
                   f"{m.num_attention_heads} = {m.hidden_size // m.num_attention_heads} must be even "
                   "(rotary embeddings rotate pairs of channels)")
    if m.num_attention_heads % m.num_key_value_heads:
        out.append(f"model.num_attention_heads={m.num_attention_heads} is not divisible by "
                   f"model.num_key_value_heads={m.num_key_value_heads}")
    return out


def _train_conflicts(t) -> list[str]:
    if t.batch_size % t.micro_batch_size:
        return [f"train.batch_size must be a multiple of train.micro_batch_size "
                f"(got {t.batch_size} and {t.micro_batch_size})"]
    if t.batch_size % (t.nproc_per_node * t.micro_batch_size):
        return [f"train.batch_size={t.batch_size} does not split into train.nproc_per_node="
                f"{t.nproc_per_node} ranks x whole micro-batches of train.micro_batch_size="
                f"{t.micro_batch_size}"]
    return []


def _ablation_conflicts(settings) -> list[str]:
    """The ablation FFN (its fields, 0 = the size's DeaMoE) and the strict variants' k_expert."""
    from deamoe.shapes import ffn_conflicts
    from deamoe.train.runs import TABLE4, ablation_size, size

    a = settings.ablation
    if a.size and a.size not in settings.pretrain.sizes:
        return [f"ablation.size {a.size!r} is not in pretrain.sizes ({', '.join(settings.pretrain.sizes)})"]
    keys = ("n_dept", "n_expert", "k_dept", "k_expert")
    ffn = {k: getattr(a, k) for k in keys}
    if not all(ffn.values()):  # 0: that field of the size's DeaMoE
        try:
            z = size(settings, ablation_size(settings))
        except ConfigError:
            return []  # reported with pretrain.sizes
        ffn = {k: v or getattr(z.deamoe, k) for k, v in ffn.items()}
    out = ffn_conflicts("deamoe", ffn, "ablation")
    strict = [v for v in a.variants if TABLE4[v][2] == "strict"]
    if strict and ffn["k_expert"] < ffn["k_dept"] and not any("strict" in p for p in out):
        out.append(f"ablation.k_expert={ffn['k_expert']} must be >= ablation.k_dept={ffn['k_dept']} for "
                   f"variant(s) {', '.join(strict)} (strict department top-k)")
    return out


def _pretrain_conflicts(settings) -> list[str]:
    """Every size of the ladder: its decoder, its FFN pair, their budget match, its seeds."""
    from deamoe import schema
    from deamoe.shapes import ffn_conflicts
    from deamoe.train.runs import size

    out = []
    for name, values in settings.pretrain.sizes.items():
        try:
            size(settings, name)
            overrides = values.get("model") if isinstance(values, dict) else None
            if isinstance(overrides, dict):  # this size's `model` fields: the model section's ranges
                out += schema.section_problems("model", overrides, f"pretrain.sizes.{name}.model")
        except ConfigError as exc:  # every conflict of a given FFN when its values are integers
            where = f"pretrain.sizes.{name}"
            lines = []
            for which, kind in (("baseline", "moe"), ("deamoe", "deamoe")):
                ffn = values.get(which) if isinstance(values, dict) else None
                counts = ("n_expert", "k_expert") + (("n_dept", "k_dept") if kind == "deamoe" else ())
                if isinstance(ffn, dict) and all(
                        isinstance(ffn.get(k), int) and not isinstance(ffn.get(k), bool) and ffn[k] > 0
                        for k in counts):
                    lines += ffn_conflicts(kind, ffn, f"{where}.{which}")
            out += lines or [str(exc)]
    return out


def _warmup_conflicts(settings) -> list[str]:
    """train.warmup_steps below the steps of every run: a warm-up as long as the run never
    reaches the peak learning rate, and its cosine decay never runs."""
    from deamoe.train.runs import ablation_run_names, run_spec, size

    warmup = settings.train.warmup_steps
    try:
        shortest = [(f"size {name}", size(settings, name).lengths[0]) for name in settings.pretrain.sizes]
        shortest += [(f"run {n}", run_spec(settings, n).steps) for n in ablation_run_names(settings)[:1]]
    except ConfigError:
        return []  # reported with its section
    for what, steps in shortest:
        if warmup >= steps:
            return [f"train.warmup_steps={warmup} must be less than the steps of every run ({what} has "
                    f"a run of {steps}: train.steps, ablation.steps, pretrain.steps, "
                    "pretrain.sizes.<size>.steps or .lengths)"]
    return []


def _eval_seed_conflicts(ev, settings) -> list[str]:
    """eval.seeds picks the pre-training runs that get the downstream tasks: a seed no size of the
    ladder trains picks none (Table 2 would be silently empty of it), and the runs of the other
    seeds get the perplexity corpora alone, so eval.tasks must hold one (their jobs failed after
    loading the model, with no task to run)."""
    from deamoe.eval.settings import PERPLEXITY_TASKS
    from deamoe.train.runs import size

    trained = sorted({seed for name in settings.pretrain.sizes for seed in size(settings, name).seeds})
    unknown = [seed for seed in ev.seeds if seed not in trained]
    if unknown:
        return [f"eval.seeds: {', '.join(map(str, unknown))} is not a seed of any pre-training size "
                f"(they train seeds {', '.join(map(str, trained))}: pretrain.seeds, "
                "pretrain.sizes.<size>.seeds), so no run would get the downstream tasks for it"]
    others = [seed for seed in trained if ev.seeds and seed not in ev.seeds]
    if others and not set(ev.tasks) & set(PERPLEXITY_TASKS):
        return [f"eval.seeds leaves seed(s) {', '.join(map(str, others))} the perplexity corpora alone, but "
                f"eval.tasks has none ({', '.join(PERPLEXITY_TASKS)}); add one, or those seeds to eval.seeds"]
    return []


def _conflicts(s: dict) -> list[str]:
    out = []
    if "model" in s:
        out += _model_conflicts(s["model"])
    if "train" in s:
        out += _train_conflicts(s["train"])
    if "data" in s and s["data"].source == "files" and not s["data"].files:
        out.append("data.files must name at least one file or glob when data.source=files")
    elif "data" in s and s["data"].source != "files" and s["data"].files:
        out.append(f"data.files names text but data.source={s['data'].source} does not read it; set "
                   "data.source: files to train on it, or leave data.files empty")
    training = ("data", "model", "train", "ablation", "pretrain")
    if all(k in s for k in training):
        from deamoe.train.settings import Settings

        settings = Settings("", *(s[k] for k in training))
        out += _pretrain_conflicts(settings) + _ablation_conflicts(settings)
        out += [] if out else _warmup_conflicts(settings)
        if "eval" in s and not out:
            out += _eval_seed_conflicts(s["eval"], settings)
    if "serve" in s and "model" in s and "train" in s:
        out += _serve_conflicts(s["serve"], s["model"], s["train"])
    if "eval" in s and "model" in s and "train" in s:
        ev, longest = s["eval"], max(s["model"].max_position_embeddings, s["train"].seq_len)
        if ev.max_length > longest:
            out.append(f"eval.max_length={ev.max_length} is more than the models' context "
                       f"(max of model.max_position_embeddings and train.seq_len: {longest})")
    return out


def _serve_conflicts(sv, m, t) -> list[str]:
    out = []
    longest = max(m.max_position_embeddings, t.seq_len)
    if sv.max_model_len is not None and sv.max_model_len < sv.input_len + sv.output_len:
        out.append(f"serve.max_model_len={sv.max_model_len} is less than serve.input_len + "
                   f"serve.output_len = {sv.input_len + sv.output_len}")
    elif sv.model_len > longest:
        out.append(f"serve.input_len + serve.output_len (+16) = {sv.model_len} is more than the "
                   f"models' context (max of model.max_position_embeddings and train.seq_len: {longest})")
    if sv.max_num_seqs is not None and sv.max_num_seqs < max(sv.concurrency):
        out.append(f"serve.max_num_seqs={sv.max_num_seqs} is less than max(serve.concurrency)="
                   f"{max(sv.concurrency)}: that level would not run at its concurrency")
    return out
