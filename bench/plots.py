"""The benchmarks' plots: the numbers of a docs/performance.md table in, SVG out
(odradek.common.plot).

Each bench script calls these with the figures it puts in its table and links the file from its
section (`figure()` writes docs/img/<name>.svg and returns the markdown image line);
bench/plots_from_doc.py calls the same functions with the figures parsed back from
docs/performance.md, so the images can be redrawn without rerunning a benchmark.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
IMG_DIR = REPO / "docs" / "img"


def _load_plot() -> ModuleType:
    """The working tree's src/odradek/plot.py, loaded by path: it imports nothing from the
    package, and BENCH_REV may put an older odradek (without it) first on sys.path."""
    spec = importlib.util.spec_from_file_location("odradek_bench_plot",
                                                  REPO / "src" / "odradek" / "common/plot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_plot = _load_plot()
bar_chart, line_chart, write_svg = _plot.bar_chart, _plot.line_chart, _plot.write_svg
PERCENTILES = ("p50", "p90", "p99", "p99.9", "max")


def img_dir() -> Path:
    """Where the images go: docs/img, or $ODRADEK_BENCH_IMG_DIR."""
    return Path(os.environ.get("ODRADEK_BENCH_IMG_DIR") or IMG_DIR)


# name -> the image's alt text, the same whether a benchmark or plots_from_doc.py writes it.
FIGURES = {
    "broker-produce": "Produce throughput by driver, acks and partitions (bar chart)",
    "broker-consume": "Consume throughput by reader and partitions (bar chart)",
    "broker-latency": "End-to-end latency by percentile, one broker (log scale)",
    "replication-throughput": "Produce throughput on 3 brokers: acks=all RF=3, acks=1 RF=3, "
                              "acks=1 RF=1 (bar chart)",
    "replication-latency": "End-to-end latency by percentile on 3 brokers (log scale)",
    "failover": "Seconds until the survivors' caches show the new leaders, by scenario, "
                "partitions and store (bar chart)",
    "spark": "Rows/s by reader: Spark format(\"odradek\") against the clients alone "
             "(bar chart)",
}


def figure(name: str, svg: str) -> str:
    """Write docs/img/<name>.svg and return its markdown image line (relative to docs/)."""
    write_svg(img_dir() / f"{name}.svg", svg)
    return f"![{FIGURES[name]}](img/{name}.svg)"


def _nines(label: str) -> float:
    """A percentile's x position: -log10(1 - p) (p50 0.3, p90 1, p99 2, p99.9 3); max at 4."""
    if label == "max":
        return 4.0
    return -math.log10(1 - float(label.lstrip("p")) / 100)


def percentiles(lat: Mapping[str, object]) -> dict[str, float]:
    """{"p50": ms, ..., "max": ms} from a benchmark's latency result (keys p50, p90, p99,
    p999, max)."""
    keys = {"p50": "p50", "p90": "p90", "p99": "p99", "p99.9": "p999", "max": "max"}
    return {p: float(lat[k]) for p, k in keys.items()}  # type: ignore[arg-type]


def latency_chart(series: Mapping[str, Mapping[str, float]], *, title: str) -> str:
    """End-to-end latency by percentile, one line per configuration, log y. `series` maps a
    configuration to {"p50": ms, "p90": ms, "p99": ms, "p99.9": ms, "max": ms}."""
    data = {name: [(_nines(p), ms) for p, ms in pcts.items() if p in PERCENTILES]
            for name, pcts in series.items()}
    return line_chart(data, title=title, y_label="latency, ms (log scale)",
                      x_label="percentile (spaced by nines: p90, p99, p99.9, then max)",
                      markers=[(_nines(p), p) for p in PERCENTILES], y_log=True)


def _driver(driver: str) -> str:
    """A table's driver name, short enough for a bar group."""
    return (driver.replace("kcat -P, ", "kcat ").replace(" produce() loop", "")
            .replace("confluent-kafka ", "confluent ").replace("batch.size=", "batch "))


def produce_chart(rows: Sequence[tuple[str, str, int, float]]) -> str:
    """Single-broker produce records/s: rows (driver, acks, partitions, records/s)."""
    groups: dict[str, dict[str, float]] = {}
    for driver, acks, parts, rate in rows:
        groups.setdefault(f"{_driver(driver)}\n{parts} partition(s)", {})[f"acks={acks}"] = rate
    return bar_chart(groups, title="Produce throughput, one broker, 100-byte records "
                                   "(median)", y_label="records/s", width=960)


def consume_chart(rows: Sequence[tuple[str, int, float]]) -> str:
    """Single-broker consume records/s: rows (driver, partitions, records/s)."""
    groups: dict[str, dict[str, float]] = {}
    for driver, parts, rate in rows:
        name = (driver.replace("confluent-kafka Consumer, assign()", "confluent Consumer")
                .replace(", big prefetch queue", " + big prefetch queue"))
        groups.setdefault(name, {})[f"{parts} partition(s)"] = rate
    return bar_chart(groups, title="Consume throughput, one broker, 100-byte records (median)",
                     y_label="records/s", width=960)


def replication_chart(rows: Sequence[tuple[int, str, float, float, float]]) -> str:
    """3-broker produce records/s: rows (partitions, driver, acks=all RF=3, acks=1 RF=3,
    acks=1 RF=1)."""
    groups: dict[str, dict[str, float]] = {}
    for parts, driver, rf3_all, rf3_one, rf1 in rows:
        groups[f"{_driver(driver)}\n{parts} partition(s)"] = {
            "acks=all, RF=3": rf3_all, "acks=1, RF=3": rf3_one, "acks=1, RF=1": rf1}
    return bar_chart(groups, title="Produce throughput, 3 broker processes (median)",
                     y_label="records/s", width=960)


def failover_chart(rows: Sequence[tuple[str, str, int, float]]) -> str:
    """Time until the survivors' caches show the new leaders: rows (scenario, store,
    partitions, seconds)."""
    groups: dict[str, dict[str, float]] = {}
    for scenario, store, parts, seconds in rows:
        name = re.sub(r"\s*\(`[^`]*`\)", "", scenario)  # "controlled shutdown (`stop_broker`)"
        groups.setdefault(f"{parts:,} partitions\n{store} store", {})[name] = seconds
    return bar_chart(groups, title="Failover: seconds until both survivors' caches show the "
                                   "new leaders (median)", y_label="seconds", width=960)


def spark_chart(rows: Sequence[tuple[str, float]]) -> str:
    """Reading a topic in full: rows (reader, rows/s)."""
    groups = {re.sub(r"\s*\(odradek\.client\)", "", reader).replace("`", ""): {"rows/s": rate}
              for reader, rate in rows}
    return bar_chart(groups, title="Reading 1 topic in full: rows/s by reader (best run)",
                     y_label="rows/s", width=960)
