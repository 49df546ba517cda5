"""Structure report for docs/architecture.md: import cycles, largest modules, private accesses.

    python .ci/structure.py              # the figures of the working tree
    python .ci/structure.py -v           # ... with every private access listed
    python .ci/structure.py --write-doc  # regenerate docs/architecture.md's before/after table
    python .ci/structure.py --check      # CI: fails on a run-time import cycle, a private
                                         # access, or a before/after table that is not current

The table sits between `<!-- structure-table before=REV -->` and `<!-- /structure-table -->`
in docs/architecture.md: "before" is the figures of git revision REV (its src/ exported to a
temporary directory and measured there in a subprocess), "after" those of the working tree.

Import cycles are the strongly connected components of odradek's module import graph (grimp), once
with every import (those under `if TYPE_CHECKING:` included) and once with the imports that run
(function-level imports included). A cross-module private access is `x._name` where `_name` is
defined or assigned in another odradek module but not in the accessing one, or `from m import
_name` from another odradek module. (Private names of other libraries, such as argparse's
`_SubParsersAction`, are theirs to answer for and are not counted.)
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
# A module may pass 1,000 lines only when it says so with this marker and why (schema tables).
ALLOWED_LONG = "structure: over 1,000 lines allowed"
DOC = ROOT / "docs" / "architecture.md"
TABLE_RE = re.compile(r"<!-- structure-table before=(\w+) -->\n.*?<!-- /structure-table -->",
                      re.DOTALL)
# The package measured: the one importable here (this tree's src/, or another revision's
# exported src/ on PYTHONPATH when --json measures that revision).
_spec = importlib.util.find_spec("odradek")
SRC = Path(next(iter(_spec.submodule_search_locations))).parent if _spec and \
    _spec.submodule_search_locations else ROOT / "src"


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


def figures() -> dict[str, object]:
    """The figures of the importable odradek, as the table shows them."""
    graph = grimp.build_graph("odradek", include_external_packages=False)
    modules = {m for m in graph.modules if m.startswith("odradek")}
    lines = {m: sum(1 for _ in _path(m).open()) for m in modules}
    sizes = sorted(((n, m) for m, n in lines.items()), reverse=True)

    def top_level(pkg: str) -> int:
        d = SRC / "odradek" / pkg
        return sum(1 for f in d.glob("*.py") if f.name != "__init__.py") if d.is_dir() else 0

    def folders(pkg: str) -> list[str]:
        d = SRC / "odradek" / pkg
        return sorted(f.name for f in d.iterdir() if (f / "__init__.py").exists()) \
            if d.is_dir() else []

    return {
        "modules": len(modules),
        "lines": sum(lines.values()),
        "cycles_all": [len(c) for c in sccs(graph, modules, type_checking=True)],
        "cycles_run": [len(c) for c in sccs(graph, modules, type_checking=False)],
        "private": len(private_accesses(modules)),
        "over_1000": [f"{m.removeprefix('odradek.')} {n}" for n, m in sizes if n > 1000],
        "largest": [f"{m.removeprefix('odradek.')} {n}" for n, m in sizes[:6]],
        "server_top": top_level("server"),
        "server_folders": folders("server"),
        "tools_top": top_level("tools"),
    }


def revision_figures(rev: str) -> dict[str, object]:
    """The figures of git revision ``rev``: its src/ exported and measured in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        out = subprocess.run([sys.executable, __file__, "--json"], check=True,
                             capture_output=True, text=True,
                             env={"PYTHONPATH": f"{tmp}/src", "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


def table(rev: str, before: dict[str, object], after: dict[str, object]) -> str:
    def cycles(f: dict[str, object], key: str) -> str:
        c = f[key]
        assert isinstance(c, list)
        return f"{len(c)}" + (f" (sizes {', '.join(map(str, c))})" if c else "")

    def listed(f: dict[str, object], key: str) -> str:
        v = f[key]
        assert isinstance(v, list)
        return ", ".join(f"`{x}`" if " " not in x else f"`{x.split()[0]}` {x.split()[1]}"
                         for x in v) or "none"

    rows = [
        ("modules in src/odradek", "modules", None),
        ("lines in src/odradek", "lines", None),
        ("import cycles, every import counted (type-only ones too)", None, "cycles_all"),
        ("import cycles among imports that run (function-level ones included)", None,
         "cycles_run"),
        ("uses of another odradek module's private names", "private", None),
        ("modules over 1,000 lines", None, "over_1000"),
        ("largest modules (lines)", None, "largest"),
        ("top-level modules in `server/`", "server_top", None),
        ("folders in `server/`", None, "server_folders"),
        ("modules in `tools/` (Kafka's tools and their shared `command`)", "tools_top", None),
    ]
    out = [f"<!-- structure-table before={rev} -->",
           f"| `python .ci/structure.py --write-doc` | before ({rev}) | after |",
           "| --- | --- | --- |"]
    for label, plain, special in rows:
        cells = []
        for f in (before, after):
            if plain is not None:
                v = f[plain]
                cells.append(f"{v:,}" if isinstance(v, int) else str(v))
            elif special in ("cycles_all", "cycles_run"):
                cells.append(cycles(f, special))
            else:
                cells.append(listed(f, special))
        out.append(f"| {label} | {cells[0]} | {cells[1]} |")
    out.append("<!-- /structure-table -->")
    return "\n".join(out)


def doc_tables() -> list[tuple[str, str]]:
    """(the revision, the table text) of each table in docs/architecture.md."""
    return [(m.group(1), m.group(0)) for m in TABLE_RE.finditer(DOC.read_text())] \
        if DOC.exists() else []


def over_limit(modules: set[str]) -> list[str]:
    """Modules over 1,000 lines that do not say why they may be (ALLOWED_LONG in the file)."""
    return [m for m in sorted(modules) if sum(1 for _ in _path(m).open()) > 1000
            and ALLOWED_LONG not in _path(m).read_text()]


def main() -> int:
    if "--json" in sys.argv:
        print(json.dumps(figures()))
        return 0
    if "--write-doc" in sys.argv:
        found = doc_tables()
        if not found:
            print(f"{DOC}: no <!-- structure-table before=REV --> block", file=sys.stderr)
            return 1
        now = figures()
        text = DOC.read_text()
        for rev, old in found:
            new = table(rev, revision_figures(rev), now)
            text = text.replace(old, new)
            print(new)
        DOC.write_text(text)
        return 0
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
    long = over_limit(modules)
    print(f"modules over 1,000 lines without '{ALLOWED_LONG}': {len(long)} {long}")
    if "--check" in sys.argv and (run_cycles or priv or long):
        print("structure check failed: run-time import cycles, cross-module private accesses "
              "or modules over 1,000 lines", file=sys.stderr)
        return 1
    if "--check" in sys.argv:
        now = figures()
        for rev, old in doc_tables():
            if table(rev, revision_figures(rev), now) != old:
                print("structure check failed: docs/architecture.md's before/after table is "
                      "not current; run python .ci/structure.py --write-doc", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
