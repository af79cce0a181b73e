"""`python -m deamoe.commands.bench_only microbench|bench ...`: the bench commands alone (no other
stage imported).

Used on GPU machines whose Python lacks other stages' dependencies; same flags as
`python -m deamoe microbench` and `python -m deamoe bench`, and the same one-line errors
(deamoe.cli.main: bad input exit status 2, Ctrl-C 130, SIGTERM 143, a fault of the program 1).
"""

import sys

from deamoe.commands.bench import register
from deamoe.cli import Parser, main

parser = Parser(prog="python -m deamoe.commands.bench_only")
parser.add_argument("--traceback", action="store_true",
                    help="on an unexpected error, print the traceback (default: one line)")
register(parser.add_subparsers(dest="command", required=True))
sys.exit(main(parser=parser))
