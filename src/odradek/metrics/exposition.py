"""The Prometheus text format (0.0.4) of a registry, written as prometheus-client's
`generate_latest` writes it for the metrics odradek has (legacy-valid metric and label names, no
timestamps, no `_created` samples) but without its per-sample name validation and escaping of
label names: a scrape of a broker hosting many partitions (four Log gauges per partition) spends
its time formatting samples. Anything outside that subset goes through `generate_latest`.
tests/unit/metrics/test_metrics_exposition.py checks the two agree byte for byte.

`text(registry)` collects and formats at once; `format_metrics(metrics)` formats metric families
collected earlier (a snapshot), so the HTTP listener can collect on the event loop and format in
a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

_TYPES = {"counter", "gauge", "histogram"}


def _escape_value(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


class _Collected(Collector):
    """Metric families collected earlier, as a collector (for generate_latest's fallback)."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def text(registry: CollectorRegistry) -> bytes:
    return format_metrics(list(registry.collect()))


def format_metrics(metrics: Iterable[Metric]) -> bytes:
    """The exposition of metric families already collected (touches no live state: may run in
    a thread)."""
    metrics = list(metrics)
    out: list[str] = []
    for metric in metrics:
        mtype = metric.type
        if mtype not in _TYPES:
            return _fallback(metrics)
        mname = metric.name + "_total" if mtype == "counter" else metric.name
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {mname} {doc}\n# TYPE {mname} {mtype}\n")
        for s in metric.samples:
            if s.timestamp is not None or s.exemplar is not None or s.name.endswith("_created"):
                return _fallback(metrics)
            labels = s.labels
            if labels:
                inner = ",".join(f'{k}="{_escape_value(v)}"'
                                 for k, v in sorted(labels.items()))
                out.append(f"{s.name}{{{inner}}} {floatToGoString(s.value)}\n")
            else:
                out.append(f"{s.name} {floatToGoString(s.value)}\n")
    return "".join(out).encode()


def _fallback(metrics: Sequence[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(metrics))
    return generate_latest(registry)
