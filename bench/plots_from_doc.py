"""Redraw the benchmark plots from the figures recorded in docs/performance.md.

    python bench/plots_from_doc.py [--doc docs/performance.md] [--no-links]

Parses the tables the benchmarks wrote (single-broker produce, consume and latency; the
3-broker summary and latency; failover; Spark), draws them with bench/plots.py (the functions
the benchmarks call when they run) into docs/img/<name>.svg, and puts an image link right
after each table that has none yet (`--no-links`: images only). Nothing else in the file
changes, so no benchmark has to be rerun. A table that is missing is skipped with a note on
stderr; a table whose columns changed is an error.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plots import (
    PERCENTILES,
    REPO,
    consume_chart,
    failover_chart,
    figure,
    latency_chart,
    produce_chart,
    replication_chart,
    spark_chart,
)


class DocError(ValueError):
    """docs/performance.md does not have the tables (or columns) expected."""


@dataclass
class Table:
    header: list[str]
    rows: list[dict[str, str]]
    end: int  # offset in the document just after the table's last line


def number(cell: str) -> float:
    """The first number of a cell: "**2,191,697**" -> 2191697.0, "0.19 (0.18-0.23)" -> 0.19."""
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?", cell.replace("*", ""))
    if m is None:
        raise DocError(f"no number in table cell {cell!r}")
    return float(m.group(0).replace(",", ""))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def find_table(doc: str, heading: str, *, start: int = 0, end: int | None = None,
               first_column: str | None = None) -> Table | None:
    """The first markdown table after the line `heading` (searched in doc[start:end]), or the
    first whose first column is `first_column`; None when the heading is absent."""
    end = len(doc) if end is None else end
    m = re.compile(rf"^{re.escape(heading)}[ \t]*$", re.M).search(doc, start, end)
    if m is None:
        return None
    pos = m.end()
    table_re = re.compile(r"((?:^\|.*\n?)+)", re.M)
    while True:
        t = table_re.search(doc, pos, end)
        if t is None:
            return None
        lines = t.group(1).rstrip("\n").split("\n")
        header = _cells(lines[0])
        if first_column is None or header[0] == first_column:
            rows = [dict(zip(header, _cells(x), strict=False)) for x in lines[2:]]
            return Table(header, rows, t.start(1) + len(t.group(1).rstrip("\n")))
        pos = t.end(1)


def _need(table: Table, *columns: str) -> None:
    missing = [c for c in columns if c not in table.header]
    if missing:
        raise DocError(f"table {' | '.join(table.header)} lacks column(s) {missing}")


def _latency(row: dict[str, str]) -> dict[str, float]:
    return {p: number(row[f"{p} ms"]) for p in PERCENTILES}


def charts(doc: str) -> list[tuple[str, str, Table]]:
    """(image name, svg, table it belongs after) for every table found in `doc`."""
    out: list[tuple[str, str, Table]] = []
    repl_start = doc.find("## Replication: 3 brokers")
    broker_end = min(x for x in (doc.find("<!-- failover:begin -->"), repl_start,
                                 doc.find("<!-- spark:begin -->"), len(doc)) if x >= 0)

    t = find_table(doc, "## Produce throughput, 100-byte records", end=broker_end)
    if t is not None:
        _need(t, "driver", "acks", "parts", "records/s")
        out.append(("broker-produce", produce_chart(
            [(r["driver"], r["acks"], int(number(r["parts"])), number(r["records/s"]))
             for r in t.rows]), t))
    t = find_table(doc, "## Consume throughput, 100-byte records", end=broker_end)
    if t is not None:
        _need(t, "driver", "parts", "records/s")
        out.append(("broker-consume", consume_chart(
            [(r["driver"], int(number(r["parts"])), number(r["records/s"])) for r in t.rows]),
            t))
    t = find_table(doc, "## End-to-end latency", end=broker_end)
    if t is not None:
        _need(t, *(f"{p} ms" for p in PERCENTILES))
        out.append(("broker-latency", latency_chart(
            {"1 broker, acks=1": _latency(t.rows[0])},
            title="End-to-end latency, one broker, 1000 msg/s"), t))

    if repl_start >= 0:
        repl_end = doc.find("<!-- replication:end -->", repl_start)
        repl_end = len(doc) if repl_end < 0 else repl_end
        t = find_table(doc, "### Summary", start=repl_start, end=repl_end)
        if t is not None:
            cols = ("acks=all, RF=3 rec/s", "acks=1, RF=3 rec/s", "acks=1, RF=1 rec/s")
            _need(t, "parts", "driver", *cols)
            out.append(("replication-throughput", replication_chart(
                [(int(number(r["parts"])), r["driver"], *(number(r[c]) for c in cols))
                 for r in t.rows]), t))  # type: ignore[misc]
        t = find_table(doc, "### End-to-end latency", start=repl_start, end=repl_end)
        if t is not None:
            _need(t, "config", *(f"{p} ms" for p in PERCENTILES))
            out.append(("replication-latency", latency_chart(
                {r["config"]: _latency(r) for r in t.rows},
                title="End-to-end latency, 3 broker processes, 1000 msg/s"), t))

    fail_start = doc.find("<!-- failover:begin -->")
    if fail_start >= 0:
        t = find_table(doc, "<!-- failover:begin -->", start=fail_start,
                       end=doc.find("<!-- failover:end -->", fail_start),
                       first_column="scenario")
        if t is not None:
            _need(t, "scenario", "store", "partitions", "caches s")
            out.append(("failover", failover_chart(
                [(r["scenario"], r["store"], int(number(r["partitions"])),
                  number(r["caches s"])) for r in t.rows]), t))

    spark_start = doc.find("<!-- spark:begin -->")
    if spark_start >= 0:
        t = find_table(doc, "<!-- spark:begin -->", start=spark_start,
                       end=doc.find("<!-- spark:end -->", spark_start), first_column="reader")
        if t is not None:
            _need(t, "reader", "rows/s")
            out.append(("spark", spark_chart([(r["reader"], number(r["rows/s"]))
                                              for r in t.rows]), t))
    return out


def add_links(doc: str, links: list[tuple[str, Table]]) -> str:
    """`doc` with each (image line, table) link put after its table, unless the image is
    linked already."""
    for link, table in sorted(links, key=lambda x: -x[1].end):
        target = link[link.index("](") + 2:-1]
        if f"]({target})" in doc:
            continue
        doc = doc[:table.end] + f"\n\n{link}" + doc[table.end:]
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doc", default=str(REPO / "docs" / "performance.md"))
    ap.add_argument("--no-links", action="store_true", help="write the images only")
    a = ap.parse_args(argv)
    path = Path(a.doc)
    try:
        doc = path.read_text(encoding="utf-8")
        found = charts(doc)
    except (OSError, DocError) as exc:
        print(f"plots_from_doc: {exc}", file=sys.stderr)
        return 2
    links = []
    for name, svg, table in found:
        links.append((figure(name, svg), table))
        print(f"wrote docs/img/{name}.svg ({len(table.rows)} table rows)", file=sys.stderr)
    missing = {"broker-produce", "broker-consume", "broker-latency", "replication-throughput",
               "replication-latency", "failover", "spark"} - {n for n, _, _ in found}
    for name in sorted(missing):
        print(f"no table for {name} in {path}: skipped", file=sys.stderr)
    if not a.no_links:
        new = add_links(doc, links)
        if new != doc:
            path.write_text(new, encoding="utf-8")
            print(f"linked {sum(1 for _ in links)} image(s) from {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
