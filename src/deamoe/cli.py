"""`python -m deamoe <command>`: argument parsing only; each stage's module does the work.

Each stage package has a `cli.py` with `register(subparsers)` adding its commands; a command's
function receives the parsed namespace and returns an exit status.  A DeaMoEError becomes one
line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Stage modules that contribute commands. Order is the order of `--help`.
STAGE_MODULES = [
    "deamoe.analysis.cli",  # table1, budget, loading
    "deamoe.train.cli",  # data, train, ablation, pretrain
    "deamoe.eval.cli",  # eval
    "deamoe.serve.cli",  # serve
    "deamoe.bench.cli",  # microbench, decode
    "deamoe.report.cli",  # report
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deamoe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name in STAGE_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real import error inside the module: surface it
                raise
            continue  # stage not present in this checkout
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from deamoe.errors import DeaMoEError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DeaMoEError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
