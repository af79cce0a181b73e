"""`python -m deamoe <command>`: the dispatcher; each stage's command module does the work.

Each stage has a module `deamoe.commands.<stage>` with `register(subparsers)` adding its
commands; a command's function receives the parsed namespace and returns an exit status.  A bad argument (checked by
the types of deamoe.argtypes), a DeaMoEError, or an unreadable/unwritable path the user named
becomes one line on stderr and exit status 2.  SIGTERM stops a command like Ctrl-C (its `finally`
blocks remove its staging folders and locks; exit status 143).  A reader that closed stdout early
(`... | head -1`) ends it quietly with exit status 141, as SIGPIPE would.  A file system that
filled while the command wrote is one line (deamoe.io names the output it was writing), exit
status 2.  Any other exception is a fault of the program, not of the input: one line naming it,
exit status 1 (`--traceback` shows where).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

# Stage modules that contribute commands. Order is the order of `--help`.
STAGE_MODULES = [
    "deamoe.commands.analysis",  # table1, budget, loading
    "deamoe.commands.train",  # data, train, ablation, pretrain
    "deamoe.commands.eval",  # eval
    "deamoe.commands.serve",  # serve
    "deamoe.commands.bench",  # microbench, decode
    "deamoe.commands.report",  # report
]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that the command unwinds as after Ctrl-C."""


def _terminate(signum, frame):
    raise Terminated()


class _StoreOnce(argparse.Action):
    """The plain `store` action of every option, refusing one given twice: argparse keeps the last
    value without a word (`--out a.csv ... --out b.csv` wrote b.csv alone, `--steps 100 ...
    --steps 5` trained 5 steps)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string is not None:
            if self.dest in parser.given:
                parser.error(f"argument {'/'.join(self.option_strings)}: given twice (argparse would "
                             "keep the last value and drop the first); give it once")
            parser.given.add(self.dest)
        setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `PROG: error: MESSAGE (see PROG --help)`, exit status 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self.given: set[str] = set()  # the options of the current parse with a value
        self.unwritten: OSError | None = None  # a write of --help's (or usage's) text that failed

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def exit(self, status=0, message=None):
        # --help's text is flushed now, as a command's output is (_run): a reader gone
        # (`--help | head -1`) is no error, where the interpreter's flush at exit reports it
        failed = self.unwritten
        try:
            sys.stdout.flush()
        except BrokenPipeError as exc:
            failed = exc
        except OSError as exc:
            failed = failed or exc
        if isinstance(failed, BrokenPipeError):
            status = status or _quiet_broken_pipe()
        elif failed is not None:  # `--help > /dev/full`: the text never arrived, which is an error
            _quiet_broken_pipe()  # the unwritten rest is not flushed again at exit
            status, message = 2, f"{self.prog}: error: could not write to stdout ({failed.strerror or failed})\n"
        super().exit(status, message)

    def _print_message(self, message, file=None):
        # argparse drops a failed write without a word (exit status 0 after --help): one to
        # stdout is kept for exit; one to stderr is argparse's as before (no line could say it)
        file = file or sys.stderr
        try:
            file.write(message or "")
        except OSError as exc:
            if file is sys.stdout:
                self.unwritten = self.unwritten or exc

    def parse_known_args(self, args=None, namespace=None):
        # A command's parser (one without subcommands) names an argument it does not take
        # itself, pointing at its own --help: argparse hands the leftovers up to the top-level
        # parser, whose message sent the user to the list of commands.
        self.given = set()
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _get_values(self, action, arg_strings):
        # An empty value (an unset shell variable) would read as the working folder, as "no
        # filter" or as the defaults; no argument of any command means anything by it (one with
        # choices: argparse's own message lists them).
        # A value that is no UTF-8 text (a file name's bytes in another encoding) would fail
        # where a path is written into a marker, a table or the report, after the work.
        if action.nargs not in (argparse.PARSER, argparse.REMAINDER) and not action.choices:
            name = "/".join(action.option_strings) or action.metavar or action.dest
            empty = [s for s in arg_strings if not s.strip()]
            if empty:
                self.error(f"argument {name}: an empty value {empty[0]!r} (an unset variable?)")
            for value in arg_strings:
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    self.error(f"argument {name}: {os.fsencode(value)!r} is not UTF-8 text (give a name "
                               "in UTF-8)")
        return super()._get_values(action, arg_strings)


def top_parser(prog: str, **kwargs) -> Parser:
    """An entry point's parser with the flags main() reads of every one (--traceback): declared
    here once, so `python -m deamoe` and `python -m deamoe.commands.bench_only` cannot drift."""
    parser = Parser(prog=prog, **kwargs)
    parser.add_argument("--traceback", action="store_true",
                        help="on an unexpected error, print the traceback (default: one line)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = top_parser("python -m deamoe", description=__doc__.splitlines()[0])
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


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run `argv` (default: sys.argv) through `parser` (default: every stage's commands)."""
    import signal

    previous = None
    with contextlib.suppress(ValueError):  # not the main thread (e.g. a test's worker): leave it
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        # a stop while the stage modules load (seconds where torch is imported) is one line too
        try:
            parser = parser or build_parser()
            argv = list(sys.argv[1:] if argv is None else argv)
            if "--traceback" in argv[1:]:  # the top-level flag, taken after the command too
                argv = ["--traceback", *(a for a in argv if a != "--traceback")]
            args = parser.parse_args(argv)
        except KeyboardInterrupt as exc:
            return _stopped(exc, getattr(parser, "prog", "python -m deamoe"))
        args.prog = parser.prog
        if problem := _given_sha_problem():
            print(f"error: {problem}", file=sys.stderr)
            return 2
        return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _given_sha_problem() -> str | None:
    """DEAMOE_GIT_SHA (the commit a copy of the tree without .git matches) is written into every
    row's git_sha as given: anything but a commit's sha is named before any work, not found by
    `bench import` or the report in the rows of a finished GPU run."""
    from deamoe.argtypes import commit_sha

    given = os.environ.get("DEAMOE_GIT_SHA", "")
    try:
        given and commit_sha(given)
    except argparse.ArgumentTypeError as exc:
        return f"DEAMOE_GIT_SHA {exc}"
    return None


def _run(args) -> int:
    from deamoe.errors import DeaMoEError

    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader gone (`| head -1`) is answered below
        return status
    except DeaMoEError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: outputs are atomic, a training run keeps its last checkpoint
        return _stopped(exc, f"{_prog(args)} {args.command}")
    except BrokenPipeError as exc:
        if not _stdout_gone():  # a pipe of the command's own (a server's, a worker's)
            return _unexpected(args, exc)
        return _quiet_broken_pipe()
    except OSError as exc:  # a path the user gave that cannot be read or written
        if exc.filename is None:
            return _unexpected(args, exc)
        hint = " (a file is where a folder is needed)" if isinstance(exc, (FileExistsError, NotADirectoryError)) else ""
        print(f"error: {exc.filename}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a fault of the program: one line unless asked
        return _unexpected(args, exc)


def _stopped(exc: KeyboardInterrupt, what: str) -> int:
    """Ctrl-C (exit status 130) or SIGTERM (Terminated, 143), named in one line."""
    if isinstance(exc, Terminated):
        print(f"terminated: {what}", file=sys.stderr)
        return 143
    print(f"interrupted: {what}", file=sys.stderr)
    return 130


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no real file behind stdout (a test's capture)
        return False


def _quiet_broken_pipe() -> int:
    """`python -m deamoe ... | head -1`: the reader took what it wanted, which is no error.  Exit
    status 141 as a shell reports SIGPIPE; stdout goes to /dev/null so that the interpreter's
    last flush of the unwritten rest does not report the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def _unexpected(args, exc: BaseException) -> int:
    if getattr(args, "traceback", False):
        raise exc
    from deamoe.errors import disk_full

    if disk_full(exc):  # outside an output's staged write (stdout); a file it named was answered before
        print(f"error: {_prog(args)} {args.command}: the file system filled while it wrote (No space left "
              "on device); free some space and run it again", file=sys.stderr)
        return 2
    first = str(exc).splitlines()[0][:300] if str(exc).strip() else ""
    print(f"error: {_prog(args)} {args.command} failed unexpectedly ({type(exc).__name__}: {first}); "
          f"rerun with `{_prog(args)} --traceback ...` to see where", file=sys.stderr)
    return 1


def _prog(args) -> str:
    return getattr(args, "prog", "python -m deamoe")


if __name__ == "__main__":
    raise SystemExit(main())
