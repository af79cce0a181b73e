"""Commands: eval (lm-eval on one checkpoint), eval-tables (downstream.csv, perplexity.csv),
eval-data (validate the shipped evaluation data).  Heavy imports stay inside the functions."""

from __future__ import annotations

from deamoe.argtypes import check_checkpoint_model, checkpoint_command, tables_command
from deamoe.errors import DeaMoEError


def register(sub) -> None:
    p = checkpoint_command(sub, "eval", "lm-eval: Table 2's ten tasks + Table 3's perplexities on one "
                           "checkpoint", "eval", "output directory, e.g. results/eval/pretrain-tiny-deamoe-s0")
    p.add_argument("--perplexity-only", action="store_true",
                   help="only the perplexity corpora among eval.tasks (runs outside eval.seeds)")
    p.set_defaults(func=cmd_eval)

    p = tables_command(sub, "eval-tables", "downstream.csv + perplexity.csv with the paper's values beside",
                       "eval", "directory holding <model>/lm_eval.json", "output directory, e.g. results/eval")
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser("eval-data", help="validate every shipped evaluation data file (errors name file:line)")
    p.add_argument("--config", default=None, help="pipeline config YAML (eval.data_dir)")
    p.set_defaults(func=cmd_data)


def _profile(config: str | None) -> str:
    from deamoe.errors import ConfigError
    from deamoe.settings import read_config

    try:
        return str(read_config(config).get("profile", ""))
    except (ConfigError, TypeError):
        return ""


def cmd_eval(args) -> int:
    from pathlib import Path

    from deamoe.errors import ConfigError
    from deamoe.eval.runner import run_eval
    from deamoe.io import OutputPathError, check_apart, check_outputs, check_writable, folder_lock
    from deamoe.settings import load_eval_settings

    s = load_eval_settings(args.config)
    if args.perplexity_only:
        import dataclasses

        from deamoe.eval.settings import PERPLEXITY_TASKS

        s = dataclasses.replace(s, tasks=tuple(t for t in s.tasks if t in PERPLEXITY_TASKS))
        if not s.tasks:  # named now: lm-eval would stop on it after the model is loaded
            raise ConfigError(f"--perplexity-only: eval.tasks has no perplexity corpus "
                              f"({', '.join(PERPLEXITY_TASKS)}); nothing to evaluate")
    result = Path(args.out) / "lm_eval.json"
    check_checkpoint_model(args.checkpoint, args.model)
    check_apart([("--out", args.out)], [("--checkpoint", args.checkpoint)])
    check_outputs(files=[result], folders=[args.out])
    from deamoe.ownership import file_in_the_way, whole_folder_above, written_whole

    hf_home = Path(s.hf_home)  # the harness's dataset cache: named now, not after loading the model
    if (hf_home.exists() and not hf_home.is_dir()) or file_in_the_way(hf_home):
        raise ConfigError(f"eval.hf_home={s.hf_home}: a file is where this cache folder goes; give a folder")
    try:  # (a read-only one: the harness failed there after the model was loaded)
        check_writable(next((p for p in (hf_home, *hf_home.parents) if p.exists()), Path.cwd()))
    except OutputPathError as exc:
        raise ConfigError(f"eval.hf_home={s.hf_home}: {exc}; give a cache folder this process can write") from None
    # the harness writes its cache there: inside the checkpoint, or another output written as a
    # whole, it would change that output (files its marker does not list)
    check_apart([("eval.hf_home", hf_home)], [("--checkpoint", args.checkpoint)])
    whole = hf_home if written_whole(hf_home) else whole_folder_above(hf_home)
    if whole is not None:
        raise ConfigError(f"eval.hf_home={s.hf_home} is or lies inside {whole}, an output a deamoe "
                          "command wrote as a whole (a checkpoint or tokenizer); give a cache folder outside it")
    if result.is_file():  # this project's: replaced only by the same model's evaluation
        from deamoe.readers import read_lm_eval

        other = (read_lm_eval(result).get("deamoe") or {}).get("model")
        if other not in (None, args.model):
            raise DeaMoEError(f"{result} holds the evaluation of model {other}; give --model {args.model} "
                              "another --out")
    with folder_lock(args.out, what="another `python -m deamoe eval`"):
        results = run_eval(s, args.checkpoint, args.model, args.out, profile=_profile(args.config))
    print(f"eval: {args.model}: {len(results['results'])} tasks/groups "
          f"in {results['deamoe']['wall_seconds']} s -> {args.out}/lm_eval.json")
    return 0


def cmd_tables(args) -> int:
    from pathlib import Path

    from deamoe.settings import load_eval_settings, load_settings
    from deamoe.eval.tables import write_tables
    from deamoe.io import check_outputs, folder_lock

    load_eval_settings(args.config)  # a bad eval section fails here too, not only in `eval`
    settings = load_settings(args.config) if args.config else None  # whose runs the tables show
    check_outputs(files=[Path(args.out) / "downstream.csv", Path(args.out) / "perplexity.csv"],
                  folders=[args.out])
    with folder_lock(args.out, what="another `python -m deamoe eval-tables`"):
        down, ppl = write_tables(args.in_dir, args.out, settings)
    print(f"eval-tables: {down}, {ppl}")
    return 0


def cmd_data(args) -> int:
    from deamoe.eval import corpus, data
    from deamoe.settings import load_eval_settings

    s = load_eval_settings(args.config)
    for task in data.DOWNSTREAM:
        print(f"{task}: {len(data.task_docs(task, s.data_dir))} rows ok")
    for task in corpus.PERPLEXITY_TASKS:
        print(f"{task}: {len(corpus.shipped_docs(task, s.data_dir))} documents ok")
    return 0
