"""The README and the docs describe what the repository holds: every import and ``odradek.X`` the
README shows resolves, every ``Cluster`` method it names exists, every design id (S-x.y) cited
anywhere has its section in docs/design.md, and nothing points outside the repository."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import odradek
from odradek.cluster import AsyncCluster, Cluster

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")

ID = re.compile(r"\bS-\d+(?:\.\d+)?\b")
HEADING_ID = re.compile(r"^#+ (S-\d+(?:\.\d+)?) ", re.M)


def resolve(dotted: str) -> Any:
    """The object a dotted name denotes: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def readme_imports() -> list[tuple[str, str]]:
    found = []
    for module, names in re.findall(r"from (odradek[\w.]*) import ([\w, ]+)", README):
        found += [(module, n.strip()) for n in names.split(",") if n.strip()]
    return found


def test_the_readme_shows_imports() -> None:
    assert ("odradek", "Cluster") in readme_imports()


@pytest.mark.parametrize(("module", "name"), readme_imports())
def test_every_import_the_readme_shows_works(module: str, name: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"from {module} import {name}", namespace)
    assert namespace[name] is not None


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"(?<![\w/.])odradek(?:\.\w+)+",
                                                       README))))
def test_every_odradek_name_the_readme_shows_exists(dotted: str) -> None:
    resolve(dotted)


def readme_cluster_methods() -> set[str]:
    """`cluster.m`, `odradek_cluster.m` in the README's code, and the methods its Cluster
    bullet names in backticks."""
    names = set(re.findall(r"\b(?:cluster|odradek_cluster)\.(\w+)", README))
    bullet = README[README.index("**`odradek.Cluster`**"):]
    bullet = bullet[:bullet.index("\n- ")]
    names |= {n for n in re.findall(r"`(\w+)(?:\(\))?`", bullet) if not n.startswith("odradek")}
    return names


def test_every_cluster_method_the_readme_names_exists() -> None:
    names = readme_cluster_methods()
    assert {"controller_id", "kill_broker", "restart_broker", "stop_broker"} <= names
    missing = sorted(n for n in names if not hasattr(Cluster, n))
    assert not missing, f"README names Cluster members that do not exist: {missing}"


def test_every_cluster_argument_the_readme_names_exists() -> None:
    arguments = set(re.findall(r"Cluster\(brokers, (.*?)\)`", README, re.S)[0].split(", "))
    names = {a.split("=")[0].strip() for a in arguments}
    assert names <= set(inspect.signature(AsyncCluster).parameters), names


def test_import_odradek_client_stays_light() -> None:
    """PySpark workers import the client: it must not load the broker or the cluster."""
    code = ("import sys, odradek.client; "
            "print(sorted(m for m in sys.modules if m.startswith(('odradek.server', "
            "'odradek.cluster', 'odradek.controller', 'odradek.storage'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.strip()
    assert out == "[]"
    assert "Cluster" in dir(odradek)


def cited_ids() -> dict[str, list[str]]:
    cited: dict[str, list[str]] = {}
    files = [ROOT / "README.md", *(p for d in ("src", "tests", "bench", "docs", "examples")
                                   for p in (ROOT / d).rglob("*")
                                   if p.suffix in {".py", ".md", ".sh"} and p.is_file())]
    for path in files:
        for sid in ID.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(sid, []).append(str(path.relative_to(ROOT)))
    return cited


def test_every_cited_design_id_has_a_section_in_design_md() -> None:
    headings = set(HEADING_ID.findall(DESIGN))
    cited = cited_ids()
    assert {"S-3.3", "S-5.2"} <= set(cited)
    missing = {sid: sorted(set(where))[:3] for sid, where in cited.items()
               if sid not in headings}
    assert not missing, f"ids without a '## S-x.y' heading in docs/design.md: {missing}"


def test_nothing_points_outside_the_repository() -> None:
    # The patterns are assembled from parts so that this file does not itself name them.
    parent_dir, work_dir = "/".join(("..", "sha" + "red")), "/" + "wo" + "rk/"
    outside = re.compile("|".join((re.escape(parent_dir), re.escape(work_dir),
                                   r"SPEC\.md", r"FACTS(?:\.md)?\b")))
    this = Path(__file__).resolve()
    hits = []
    for d in ("src", "tests", "bench", "docs", "examples"):
        for path in (ROOT / d).rglob("*"):
            if path.suffix in {".py", ".md", ".sh", ".toml"} and path.is_file() and path != this:
                for n, line in enumerate(path.read_text(encoding="utf-8",
                                                        errors="replace").splitlines(), 1):
                    if outside.search(line):
                        hits.append(f"{path.relative_to(ROOT)}:{n}")
    hits += [f"README.md:{n}" for n, line in enumerate(README.splitlines(), 1)
             if outside.search(line)]
    assert not hits, hits
