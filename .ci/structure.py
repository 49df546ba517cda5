"""Structure report for docs/architecture.md: import cycles, largest modules, private accesses.

    python .ci/structure.py            # the figures, as printed in the doc's before/after table
    python .ci/structure.py -v         # ... with every private access listed
    python .ci/structure.py --check    # CI: fails on a run-time import cycle or a private access

Import cycles are the strongly connected components of odradek's module import graph (grimp), once
with every import (those under `if TYPE_CHECKING:` included) and once with the imports that run
(function-level imports included). A cross-module private access is `x._name` where `_name` is
defined or assigned in another odradek module but not in the accessing one, or `from m import
_name` from another odradek module. (Private names of other libraries, such as argparse's
`_SubParsersAction`, are theirs to answer for and are not counted.)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

SRC = Path(__file__).resolve().parent.parent / "src"


def sccs(graph: grimp.ImportGraph, modules: set[str], *, type_checking: bool) -> list[set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m in modules:
        for imp in graph.find_modules_directly_imported_by(m):
            if imp not in modules:
                continue
            if not type_checking:
                details = graph.get_import_details(importer=m, imported=imp)
                if all(_is_type_checking(m, d["line_number"]) for d in details):
                    continue
            edges[m].add(imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


_TC_LINES: dict[str, set[int]] = {}


def _is_type_checking(module: str, line: int) -> bool:
    if module not in _TC_LINES:
        tree = ast.parse(_path(module).read_text())
        lines: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for sub in node.body:
                    lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
        _TC_LINES[module] = lines
    return line in _TC_LINES[module]


def _path(module: str) -> Path:
    p = SRC.joinpath(*module.split("."))
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


def _defined_names(tree: ast.AST) -> set[str]:
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    return defined


def private_accesses(modules: set[str]) -> list[str]:
    found = []
    trees = {m: ast.parse(_path(m).read_text()) for m in modules}
    defined_in = {m: _defined_names(t) for m, t in trees.items()}
    anywhere = set().union(*defined_in.values())
    for m in sorted(modules):
        tree, defined = trees[m], defined_in[m]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and \
                    node.attr in anywhere and node.attr not in defined and \
                    not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{m}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__" and \
                    (node.level > 0 or (node.module or "").startswith("odradek")):
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{m}:{node.lineno} import {alias.name}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def main() -> int:
    graph = grimp.build_graph("odradek", include_external_packages=False)
    modules = {m for m in graph.modules if m.startswith("odradek")}
    all_cycles = sccs(graph, modules, type_checking=True)
    run_cycles = sccs(graph, modules, type_checking=False)
    print(f"modules: {len(modules)}")
    print(f"import cycles (all imports): {len(all_cycles)}, sizes {[len(c) for c in all_cycles]}")
    print(f"import cycles (run-time imports): {len(run_cycles)}, "
          f"sizes {[len(c) for c in run_cycles]}")
    for c in run_cycles:
        print("  ", " ".join(sorted(c)))
    sizes = sorted(((sum(1 for _ in _path(m).open()), m) for m in modules), reverse=True)
    print("largest modules:", ", ".join(f"{m.removeprefix('odradek.')} {n}"
                                          for n, m in sizes[:6]))
    priv = private_accesses(modules)
    print(f"cross-module private accesses: {len(priv)}")
    if "-v" in sys.argv or "--check" in sys.argv:
        print("\n".join(f"   {p}" for p in priv))
    if "--check" in sys.argv and (run_cycles or priv):
        print("structure check failed: run-time import cycles or cross-module private accesses",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
