"""Commands: data, train, ablation, pretrain (flags and config loading; torch imported lazily)."""

from __future__ import annotations

import os
import sys

from deamoe.argtypes import config_int, config_int_list, output_file, positive_float


def register(sub) -> None:
    p = sub.add_parser("data", help="corpus -> tokenizer + token shards (train.bin, val.bin, meta.json)")
    p.add_argument("--config", required=True, help="pipeline config YAML (sections data, train)")
    p.add_argument("--out", required=True, help="output directory, e.g. results/data")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("train", help="train one run (ablation-<no1..no6>-s<seed>, pretrain-<size>-<baseline|deamoe>-s<seed>)")
    p.add_argument("--config", required=True)
    p.add_argument("--run", required=True, help="run name, e.g. ablation-no1-s0 or pretrain-tiny-deamoe-s0")
    p.add_argument("--data", required=True, help="directory written by `deamoe data`")
    p.add_argument("--out", required=True, help="run directory, e.g. results/train/ablation-no1-s0")
    p.add_argument("--steps", type=config_int("train", "steps"), help="override the run's step count (smoke tests)")
    p.add_argument("--max-seconds", type=positive_float,
                   help="stop after this much training wall time (time-boxed GPU measurements)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("ablation", help="Table 4 summary of the six ablation runs, paper values beside")
    p.add_argument("--config", required=True)
    p.add_argument("--runs", required=True, help="directory holding results/train/<run>/")
    p.add_argument("--out", required=True, type=output_file, help="summary CSV, e.g. results/ablation/summary.csv")
    p.set_defaults(func=cmd_ablation)

    p = sub.add_parser("pretrain", help="DeaMoE vs budget-matched baseline: one row per run of the ladder")
    p.add_argument("--config", required=True)
    p.add_argument("--runs", required=True)
    p.add_argument("--out", required=True, type=output_file, help="summary CSV, e.g. results/pretrain/summary.csv")
    p.add_argument("--size", default="", help="only this size of pretrain.sizes (default: all)")
    p.add_argument("--eval", dest="eval_dir", default="",
                   help="directory holding <run>/lm_eval.json: add perplexities and task accuracies")
    p.add_argument("--steps", type=config_int("train", "steps"), default=0,
                   help="the runs of this length of each size's tokens axis (default: each size's own steps)")
    p.add_argument("--keep", nargs="+", default=[], metavar="TABLE",
                   help="earlier summary CSVs of these runs: a row (and curve, from a curves.csv "
                   "beside its table) stands for a run of the plan that --runs does not hold, e.g. the "
                   "seeds of an earlier call beside newly trained extra_seeds; a run trained as "
                   "another size's (smallrms' baselines are small's) is found in that size's table")
    p.add_argument("--seeds", type=config_int_list("pretrain", "seeds"), default=[], metavar="S,S",
                   help="only these seeds of the plan (default: all): a length whose first seeds are "
                   "trained and the rest not yet; a later join takes this table with --keep")
    p.set_defaults(func=cmd_pretrain)


def cmd_data(args) -> int:
    from pathlib import Path

    from deamoe.io import check_outputs, folder_lock
    from deamoe.train.data import prepare
    from deamoe.settings import load_settings

    s = load_settings(args.config)
    out = Path(args.out)
    check_outputs(files=[out / n for n in ("train.bin", "val.bin", "meta.json")], dirs=[out / "tokenizer"],
                  folders=[out])
    with folder_lock(out, what="another `python -m deamoe data`"):
        meta = prepare(s.data, out, seq_len=s.train.seq_len)
    print(f"data: {meta['train_tokens']} train / {meta['val_tokens']} held-out tokens, "
          f"vocab {meta['vocab_size']} -> {args.out}")
    return 0


def cmd_train(args) -> int:
    import dataclasses

    from deamoe.train import parallel
    from deamoe.train.runs import run_spec
    from deamoe.settings import load_settings

    s = load_settings(args.config)
    spec = run_spec(s, args.run)
    if args.steps:
        spec = dataclasses.replace(spec, steps=args.steps)
    if parallel.under_torchrun():  # a rank: the launching process holds the run folder's lock
        return _train(s, spec, args)
    from contextlib import nullcontext

    from deamoe.io import check_apart, check_output_folder, folder_lock

    check_apart([("--out", args.out)], [("--data", args.data)])
    check_output_folder(args.out)  # before its lock file is made there
    nproc, nodes = s.train.nproc_per_node, parallel.slurm_launchers()
    # One trainer per run folder: a second one (e.g. started by --rerun-incomplete while an
    # orphaned job of a killed Snakemake still runs) stops here, naming the first one's PID.  With
    # one launcher per node (SLURM), the first node's launcher holds it for all of them.
    first = nodes == 1 or os.environ.get("SLURM_PROCID") == "0"
    with folder_lock(args.out, "train.lock", what="another trainer") if first else nullcontext():
        if nproc > 1 or nodes > 1:
            parallel.check_gpus(parallel.resolve_device(s.train.device), nproc)
            if s.train.batch_size % (nodes * nproc * s.train.micro_batch_size):
                from deamoe.errors import ConfigError

                raise ConfigError(
                    f"train.batch_size={s.train.batch_size} must be a multiple of {nodes} node(s) x "
                    f"train.nproc_per_node={nproc} x train.micro_batch_size={s.train.micro_batch_size}"
                )
            argv = ["train", "--config", args.config, "--run", args.run, "--data", args.data, "--out", args.out]
            if args.steps:
                argv += ["--steps", str(args.steps)]
            if args.max_seconds:
                argv += ["--max-seconds", str(args.max_seconds)]
            return parallel.launch(nproc, argv)
        return _train(s, spec, args)


def _train(s, spec, args) -> int:
    from deamoe.train.trainer import train_run

    summary = train_run(s, spec, args.data, args.out, max_seconds=args.max_seconds or 0.0)
    if summary:
        print(f"{spec.name}: loss(last {summary['last_n']}) {summary['loss_last_n']:.4f}, "
              f"held-out {summary['val_loss']:.4f}, {summary['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    return 0


def _summary_command(args, name: str, write, evals: bool = False) -> int:
    """A summary command: its outputs checked before any work, its folder held while it writes."""
    from pathlib import Path

    from deamoe.errors import absent
    from deamoe.io import check_apart, check_outputs, folder_lock
    from deamoe.readers import input_folder
    from deamoe.train.summaries import summary_outputs

    input_folder(args.runs, "--runs: the training runs' folder, e.g. results/train")
    if evals:  # else named only after every run's summary is read, or as a missing run's
        input_folder(args.eval_dir, "--eval: the evaluations' folder, e.g. results/eval")
    outputs = summary_outputs(args.out, evals)
    kept = []  # inputs too: earlier tables (pretrain --keep) and the curves.csv beside each, if any
    for keep in getattr(args, "keep", []):
        curves = Path(keep).with_name("curves.csv")
        kept += [("--keep", keep)] + ([] if absent(curves) else [("--keep's curves table", curves)])
    check_apart([("--out", outputs[0]), *((f"its {p.stem} table", p) for p in outputs[1:])],
                [("--runs", args.runs), *((("--eval", args.eval_dir),) if evals else ()), *kept])
    check_outputs(files=outputs)
    with folder_lock(Path(args.out).parent, what=f"another `python -m deamoe {name}`"):
        write()
    return 0


def cmd_ablation(args) -> int:
    from deamoe.settings import load_settings
    from deamoe.train.summaries import ablation_summary

    s = load_settings(args.config)
    return _summary_command(args, "ablation", lambda: ablation_summary(s, args.config, args.runs, args.out))


def cmd_pretrain(args) -> int:
    from deamoe.train.summaries import pretrain_summary

    if args.keep and args.eval_dir:
        from deamoe.errors import ConfigError

        raise ConfigError("pretrain: --keep and --eval do not go together (a kept row's "
                          "evaluation is not re-read); join the evaluated length without --keep")
    from functools import partial
    from pathlib import Path

    from deamoe.eval.tables import run_eval_columns
    from deamoe.settings import load_settings

    s = load_settings(args.config)
    return _summary_command(args, "pretrain", lambda: pretrain_summary(
        s, args.config, args.runs, args.out, size=args.size, steps=args.steps, keep=tuple(args.keep),
        seeds=tuple(args.seeds),
        evals=partial(run_eval_columns, Path(args.eval_dir)) if args.eval_dir else None),
        evals=bool(args.eval_dir))
