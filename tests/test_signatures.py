"""No function of src/deamoe takes more than 10 parameters, read from the source with `ast`:
related arguments travel as one object (a GemmSpec, DeaMoEWeights, a settings dataclass).
Triton kernels (their launch signature is the kernel's ABI) and transformers config classes
(whose __init__ spells out every config field by the library's convention) are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "deamoe"
MOST = 10
EXEMPT_BASES = ("PretrainedConfig",)  # transformers config classes


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller can pass: positional, keyword-only, *args, **kwargs; not self / cls."""
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return (len([n for n in names if n not in ("self", "cls")]) + (a.vararg is not None)
            + (a.kwarg is not None))


def is_triton_kernel(fn) -> bool:
    return any("jit" in ast.unparse(d).split("(")[0] for d in fn.decorator_list)


def too_long(source: str, where: str = "") -> list[str]:
    """'file:line name (n parameters)' for every function of `source` over MOST parameters."""
    tree = ast.parse(source)
    exempt = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b).split(".")[-1] in EXEMPT_BASES
                                                   for b in node.bases):
            exempt |= {id(f) for f in ast.walk(node)}
    return [f"{where}:{fn.lineno} {fn.name} ({parameters(fn)} parameters)"
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(fn) not in exempt
            and not is_triton_kernel(fn) and parameters(fn) > MOST]


def test_no_function_takes_more_than_ten_parameters():
    bad = [line for path in sorted(SRC.rglob("*.py"))
           for line in too_long(path.read_text(), str(path.relative_to(SRC.parents[1])))]
    assert not bad, f"functions with more than {MOST} parameters:\n" + "\n".join(bad)


def test_the_count_and_its_exemptions():
    args = ", ".join(f"a{i}" for i in range(11))
    source = (f"def f({args}): pass\n"
              f"def g(self, {', '.join(f'a{i}' for i in range(9))}, *rest, **kw): pass\n"
              f"def h(self, {', '.join(f'a{i}' for i in range(8))}, *rest, **kw): pass\n"
              f"@triton.jit\ndef kernel({args}): pass\n"
              f"@triton.jit(do_not_specialize=['a0'])\ndef kernel2({args}): pass\n"
              f"class C(transformers.PretrainedConfig):\n    def __init__(self, {args}): pass\n"
              f"class D:\n    def __init__(self, {args}): pass\n")
    assert [line.split(" (")[0] for line in too_long(source)] == [":1 f", ":2 g", ":11 __init__"]
