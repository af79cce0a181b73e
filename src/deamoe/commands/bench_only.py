"""`python -m deamoe.commands.bench_only microbench|bench ...`: the bench commands alone (no other
stage imported).

Used on GPU machines whose Python lacks other stages' dependencies; same flags as
`python -m deamoe microbench` and `python -m deamoe bench`, and the same one-line errors
(deamoe.cli.main: bad input exit status 2, Ctrl-C 130, SIGTERM 143, a fault of the program 1).
"""

import sys

from deamoe.commands.bench import register
from deamoe.cli import main, top_parser

parser = top_parser("python -m deamoe.commands.bench_only")
register(parser.add_subparsers(dest="command", required=True))
sys.exit(main(parser=parser))
