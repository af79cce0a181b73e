"""`python -m deamoe.bench microbench|bench ...`: the bench commands alone (no other stage imported).

Used on GPU machines whose Python lacks other stages' dependencies; same flags as
`python -m deamoe microbench` and `python -m deamoe bench`.
"""

import sys

from deamoe.bench.cli import register
from deamoe.cli import Parser
from deamoe.errors import DeaMoEError

parser = Parser(prog="python -m deamoe.bench")
register(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args()
try:
    sys.exit(int(args.func(args) or 0))
except DeaMoEError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
