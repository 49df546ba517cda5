"""bench/plots_from_doc.py: the benchmark tables of docs/performance.md parsed back into plots
(the same bench/plots.py functions the benchmarks call), and the image links put after the
tables once, leaving every other line of the document as it was."""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
NS = "{http://www.w3.org/2000/svg}"


def _load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


pfd = _load("plots_from_doc")

DOC = """# Performance

## Produce throughput, 100-byte records

Some words.

| driver | acks | parts | records | s | records/s | note |
|---|---|---:|---:|---:|---:|---|
| kcat -P, batch.size=1000000 | 1 | 1 | 2,000,000 | 0.91 | **2,191,697** | 3 runs |
| kcat -P, batch.size=1000000 | all | 1 | 2,000,000 | 0.89 | **1,000,000** | 3 runs |

Anchors: words.

<!-- failover:begin -->
## Control plane

| scenario | store | partitions | RF | caches s |
|---|---|---:|---:|---:|
| kill -9 a broker | embedded | 1,000 | 3 | **0.13 (0.12-0.17)** |
| controlled shutdown (`stop_broker`) | embedded | 10,000 | 3 | **12.40 (7.34-12.88)** |

Column notes.
<!-- failover:end -->
"""


def bars(svg: str) -> list[tuple[str, float]]:
    """(tooltip, height) of every bar."""
    root = ET.fromstring(svg)
    return [((r.find(f"{NS}title").text or ""), float(r.attrib["height"]))  # type: ignore[union-attr]
            for r in root.iter(f"{NS}rect") if r.attrib.get("class") == "bar"]


def test_number_reads_a_table_cell_and_refuses_a_dash() -> None:
    assert pfd.number("**2,191,697**") == 2191697
    assert pfd.number("0.19 (0.18-0.23)") == 0.19
    assert pfd.number("-3.5 ms") == -3.5
    with pytest.raises(pfd.DocError):
        pfd.number("-")


def test_charts_follow_the_tables() -> None:
    found = {name: (svg, table) for name, svg, table in pfd.charts(DOC)}
    assert set(found) == {"broker-produce", "failover"}
    produce = bars(found["broker-produce"][0])
    assert [t for t, _ in produce] == ["kcat batch 1000000\n1 partition(s) / acks=1: 2.1917e+06",
                                       "kcat batch 1000000\n1 partition(s) / acks=all: 1e+06"]
    assert produce[0][1] / produce[1][1] == pytest.approx(2.191697, rel=1e-3)
    failover = bars(found["failover"][0])
    assert failover[1][1] / failover[0][1] == pytest.approx(12.40 / 0.13, rel=1e-2)
    assert "controlled shutdown" in ET.tostring(ET.fromstring(found["failover"][0]),
                                                encoding="unicode")


def test_links_inserted_once_and_nothing_else_changes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODRADEK_BENCH_IMG_DIR", str(tmp_path / "img"))
    doc = tmp_path / "performance.md"
    doc.write_text(DOC)
    assert pfd.main(["--doc", str(doc)]) == 0
    once = doc.read_text()
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == ["broker-produce.svg",
                                                                     "failover.svg"]
    lines = once.splitlines()
    link = next(i for i, x in enumerate(lines) if x.startswith("![") and "broker-produce" in x)
    assert lines[link - 2].startswith("| kcat -P") and lines[link - 1] == ""
    assert lines[link + 1] == "" and lines[link + 2] == "Anchors: words."
    links = [x for x in lines if x.startswith("![")]
    assert len(links) == 2
    assert once.replace(f"\n\n{links[0]}", "").replace(f"\n\n{links[1]}", "") == DOC
    assert pfd.main(["--doc", str(doc)]) == 0
    assert doc.read_text() == once


def test_changed_columns_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text(DOC.replace("| caches s |", "| cache s |"))
    assert pfd.main(["--doc", str(doc), "--no-links"]) == 2
    assert "lacks column(s) ['caches s']" in capsys.readouterr().err
