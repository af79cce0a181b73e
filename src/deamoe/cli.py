"""`python -m deamoe <command>`: argument parsing only; each stage's module does the work.

Each stage package has a `cli.py` with `register(subparsers)` adding its commands; a command's
function receives the parsed namespace and returns an exit status.  A bad argument (checked by
the types of deamoe.argtypes), a DeaMoEError, or an unreadable/unwritable path the user named
becomes one line on stderr and exit status 2.
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


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `PROG: error: MESSAGE (see PROG --help)`, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m deamoe", description=__doc__.splitlines()[0])
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
    except KeyboardInterrupt:  # Ctrl-C: outputs are atomic, a training run keeps its last checkpoint
        print(f"interrupted: python -m deamoe {args.command}", file=sys.stderr)
        return 130
    except OSError as exc:  # a path the user gave that cannot be read or written
        if exc.filename is None:
            raise
        hint = " (a file is where a folder is needed)" if isinstance(exc, (FileExistsError, NotADirectoryError)) else ""
        print(f"error: {exc.filename}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
