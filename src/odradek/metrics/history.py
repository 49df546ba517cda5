"""The last minutes of a few key series, sampled every second, for the console's charts.

`MetricsHistory(metrics)` keeps one bounded ring buffer per series (`SERIES`); `sample(now)`
appends one point to each (rates are the counters' deltas over the interval since the previous
sample; the p99 series are taken from the histogram buckets filled during the interval, as an
upper bound: the bucket's bound). `run()` samples every `interval_s` until cancelled (the broker
starts it as a task). `series(names)` -> {name: [(unix seconds, value), ...]}.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable

from .collectors import controller_gauges, replica_manager_gauges
from .registry import BrokerMetrics
from .stats import Histogram

SERIES: tuple[str, ...] = (
    "messages_in_per_sec", "bytes_in_per_sec", "bytes_out_per_sec",
    "under_replicated_partitions", "offline_partitions", "active_controller_count",
    "produce_requests_per_sec", "fetch_requests_per_sec",
    "produce_total_time_p99_ms", "fetch_total_time_p99_ms", "event_loop_lag_p99_seconds",
)
DEFAULT_SAMPLES = 600  # ten minutes at one sample a second


def interval_quantile(h: Histogram, previous: list[int], q: float) -> float:
    """The q-quantile (bucket bound) of what `h` recorded since its counts were `previous`;
    `previous` is updated to the current counts."""
    delta = Histogram(h.bounds)
    delta.counts = [now - before for now, before in zip(h.counts, previous, strict=True)]
    previous[:] = h.counts
    return delta.quantile(q)


class MetricsHistory:
    def __init__(self, metrics: BrokerMetrics, samples: int = DEFAULT_SAMPLES,
                 clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.clock = clock
        self.buffers: dict[str, deque[tuple[float, float]]] = {
            name: deque(maxlen=samples) for name in SERIES}
        self._last_time: float | None = None
        self._last_counts: dict[str, int] = {}
        self._last_buckets: dict[str, list[int]] = {}

    def _counters(self) -> dict[str, int]:
        m = self.metrics
        total = m.topics.total
        by_name = m.requests.by_name
        return {"messages_in_per_sec": total.messages_in, "bytes_in_per_sec": total.bytes_in,
                "bytes_out_per_sec": total.bytes_out,
                "produce_requests_per_sec": t.requests if (t := by_name.get("Produce")) else 0,
                "fetch_requests_per_sec": t.requests if (t := by_name.get("Fetch")) else 0}

    def _p99(self, key: str, h: Histogram) -> float:
        # a histogram seen for the first time: all it holds is new
        previous = self._last_buckets.setdefault(key, [0] * len(h.counts))
        return interval_quantile(h, previous, 0.99)

    def sample(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        m = self.metrics
        values: dict[str, float] = {}
        counters = self._counters()
        dt = None if self._last_time is None else now - self._last_time
        for name, count in counters.items():
            before = self._last_counts.get(name)
            values[name] = ((count - before) / dt if dt and before is not None else 0.0)
        self._last_counts, self._last_time = counters, now
        rm = m.replica_manager_collector
        if rm is not None:
            values["under_replicated_partitions"] = replica_manager_gauges(
                rm.partitions(), rm.min_isr)["underreplicatedpartitions"]
        c = m.controller_collector
        if c is not None:
            gauges = controller_gauges(c.active(), c.context())
            values["offline_partitions"] = gauges["offlinepartitionscount"]
            values["active_controller_count"] = gauges["activecontrollercount"]
        for request in ("Produce", "Fetch"):
            timer = m.requests.by_name.get(request)
            values[f"{request.lower()}_total_time_p99_ms"] = (
                self._p99(request, timer.total_time_ms) if timer else 0.0)
        values["event_loop_lag_p99_seconds"] = self._p99("lag", m.event_loop_lag)
        for name, value in values.items():
            self.buffers[name].append((now, float(value)))

    def series(self, names: Iterable[str]) -> dict[str, list[tuple[float, float]]]:
        """The points of each known name (unknown names are left out)."""
        return {n: list(self.buffers[n]) for n in names if n in self.buffers}

    async def run(self, interval_s: float = 1.0) -> None:
        while True:
            self.sample()
            await asyncio.sleep(interval_s)
