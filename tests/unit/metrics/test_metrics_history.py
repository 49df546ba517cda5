"""MetricsHistory: per-second rates from the counters, gauges from the registered state, p99s
of the interval, bounded ring buffers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.metrics.history import SERIES, MetricsHistory, interval_quantile
from odradek.metrics.registry import BrokerMetrics
from odradek.metrics.stats import Histogram


@dataclass
class P:
    topic: str
    index: int
    replicas: list[int]
    isr: list[int]
    is_leader: bool = True


@dataclass
class Ctx:
    all_topics: set[str] = field(default_factory=set)
    partition_assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    partition_leadership: dict[Any, Any] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    offline: set[Any] = field(default_factory=set)

    def partitions_with_offline_leader(self) -> set[Any]:
        return self.offline


def test_rates_and_gauges() -> None:
    m = BrokerMetrics(1)
    parts = [P("t", 0, [1, 2], [1])]
    ctx = Ctx(offline={("u", 0), ("u", 1)})
    m.register_replica_manager(lambda: parts, lambda _t: 1, {}, lambda: 0)
    m.register_controller(lambda: True, lambda: ctx)
    h = MetricsHistory(m)
    h.sample(100.0)
    m.topics.record_append("t", 50, 5000)
    m.requests.timer("Produce").record(0.001, 0.2)
    h.sample(102.0)
    got = h.series(["messages_in_per_sec", "bytes_in_per_sec", "under_replicated_partitions",
                    "offline_partitions", "active_controller_count",
                    "produce_requests_per_sec", "produce_total_time_p99_ms", "nonsense"])
    assert "nonsense" not in got
    assert got["messages_in_per_sec"] == [(100.0, 0.0), (102.0, 25.0)]
    assert got["bytes_in_per_sec"][-1] == (102.0, 2500.0)
    assert got["under_replicated_partitions"][-1] == (102.0, 1.0)
    assert got["offline_partitions"][-1] == (102.0, 2.0)
    assert got["active_controller_count"][-1] == (102.0, 1.0)
    assert got["produce_requests_per_sec"][-1] == (102.0, 0.5)
    assert got["produce_total_time_p99_ms"][-1] == (102.0, 250.0)  # 200 ms: bucket <= 250
    h.sample(103.0)  # nothing new in this interval
    assert h.series(["produce_total_time_p99_ms"])["produce_total_time_p99_ms"][-1][1] == 0.0


def test_buffers_are_bounded() -> None:
    h = MetricsHistory(BrokerMetrics(1), samples=5)
    for t in range(12):
        h.sample(float(t))
    points = h.series(SERIES)
    assert set(points) == {"messages_in_per_sec", "bytes_in_per_sec", "bytes_out_per_sec",
                           "produce_requests_per_sec", "fetch_requests_per_sec",
                           "produce_total_time_p99_ms", "fetch_total_time_p99_ms",
                           "event_loop_lag_p99_seconds", "under_replicated_partitions",
                           "offline_partitions", "active_controller_count"}
    assert [t for t, _ in points["messages_in_per_sec"]] == [7.0, 8.0, 9.0, 10.0, 11.0]
    # without a registered replica manager / controller: no points for those gauges
    assert points["under_replicated_partitions"] == []


def test_interval_quantile_uses_only_new_observations() -> None:
    h = Histogram([1, 10, 100])
    for _ in range(100):
        h.observe(50)
    previous = list(h.counts)
    h.observe(0.5)
    assert interval_quantile(h, previous, 0.99) == 1
    assert previous == h.counts
