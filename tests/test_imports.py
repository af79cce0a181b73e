"""The package's import graph, read from the source with `ast`: no module of src/deamoe imports
itself through others (module-level and function-level imports, absolute and relative, count
alike), and the layers import only downwards (docs/architecture.md).

An import of `deamoe.a.b` is an edge to module deamoe.a.b; `from deamoe.a import b` to deamoe.a.b
when b is a module, else to deamoe.a.  The parent packages a dotted import also runs are left out:
Python has them in sys.modules before their submodules, so they cannot close a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# package -> the packages it must not import (docs/architecture.md: who may import whom)
FORBIDDEN = {
    "model": {"kernels", "decode", "train", "eval", "serve", "bench", "report"},
    "kernels": {"decode", "train", "eval", "serve", "bench", "report"},
    "decode": {"train", "eval", "serve", "bench", "report"},
    "analysis": {"train", "eval", "serve", "bench", "report"},
    "train": {"serve", "bench", "report"},
    "eval": {"serve", "bench", "report"},
    "serve": {"bench", "report"},
    "bench": {"report"},
}
# the commands and the config loader sit above every stage: a stage's library takes checked
# settings as arguments and never loads a config file or parses a command line itself
for _stage in ("model", "kernels", "decode", "analysis", "train", "eval", "serve", "bench", "report"):
    FORBIDDEN[_stage] = FORBIDDEN.get(_stage, set()) | {"commands", "settings", "checks"}


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package __init__)} of every module under src/deamoe."""
    out = {}
    for path in sorted((src / "deamoe").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """{module: the deamoe modules it imports anywhere in its file}."""
    mods = modules(src)

    def known(name: str) -> str | None:  # the longest prefix of `name` that is a module
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, (path, package) in mods.items():
        here = name if package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package `level - 1` above this module's
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else known(base)
                            for a in node.names}
        graph[name] = {t for t in targets if t and t.startswith("deamoe") and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One loop through each group of modules that import each other (Tarjan's strongly
    connected components), as [a, b, ..., a]."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_loop(graph, set(g)) for g in groups]


def _loop(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A path from the group's first module back to itself inside the group (breadth first)."""
    start = min(group)
    paths = {w: [start, w] for w in graph[start] & group}
    frontier = list(paths)
    while start not in paths:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return paths[start]


def package_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_private_name_is_imported_from_another_module():
    # a helper two modules use is public in the module that owns it
    bad = []
    for name, (path, _) in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                    "deamoe")):
                bad += [f"{name} imports {a.name} from {node.module}" for a in node.names
                        if a.name.startswith("_")]
    assert not bad, "\n".join(bad)


def test_layers_import_only_downwards():
    bad = sorted(f"{m} imports {t}" for m, targets in import_graph().items()
                 for t in targets if package_of(t) in FORBIDDEN.get(package_of(m), ()))
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


@pytest.fixture
def fake_src(tmp_path):
    def write(files: dict[str, str]) -> Path:
        for rel, text in files.items():
            path = tmp_path / "deamoe" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return tmp_path
    return write


def test_a_function_level_or_relative_import_closes_a_loop(fake_src):
    src = fake_src({"__init__.py": "", "a.py": "from deamoe import b\n",
                    "b.py": "def f():\n    from deamoe.pkg.c import g\n",
                    "pkg/__init__.py": "", "pkg/c.py": "from ..a import x\n",
                    "d.py": "import deamoe.a\n"})
    graph = import_graph(src)
    assert graph["deamoe.pkg.c"] == {"deamoe.a"} and graph["deamoe.d"] == {"deamoe.a"}
    assert cycles(graph) == [["deamoe.a", "deamoe.b", "deamoe.pkg.c", "deamoe.a"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
