"""odradek's text exposition writer agrees byte for byte with prometheus-client's
generate_latest on every kind of family a broker has, and falls back to it otherwise."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Info, generate_latest

from odradek.metrics import exposition
from odradek.metrics.registry import BrokerMetrics


@dataclass
class FakeLog:
    topic: str
    partition: int
    size: int = 12345678901
    num_segments: int = 2
    log_start_offset: int = 0
    log_end_offset: int = 10**12


def test_same_bytes_as_generate_latest() -> None:
    m = BrokerMetrics(3)
    m.topics.record_append('odd"topic\\with\nescapes', 1, 10)
    m.topics.record_append("t", 7, 700)
    m.requests.timer("Produce").record(0.0004, 0.25)
    m.register_logs(lambda: [FakeLog("t", 0), FakeLog("t", 1, 0, 1, 5, 5)])
    m.register_groups(lambda: [])
    m.event_loop_lag.observe(0.003)
    assert exposition.text(m.registry) == generate_latest(m.registry)
    assert m.render() == generate_latest(m.registry)


def test_other_kinds_fall_back_to_generate_latest() -> None:
    reg = CollectorRegistry()
    Counter("c", "with a created sample", registry=reg).inc()  # has c_created
    Info("i", "an info", registry=reg).info({"a": "b"})
    assert exposition.text(reg) == generate_latest(reg)


def test_snapshot_reads_now_and_formats_later() -> None:
    """The HTTP listener calls snapshot() on the event loop and the formatting in a thread:
    what the formatting writes is what was read at the snapshot."""
    logs = [FakeLog("t", 0, size=100)]
    m = BrokerMetrics(1)
    m.register_logs(lambda: logs)
    m.register_groups(lambda: [])
    m.register_logs(lambda: logs)  # re-registered: goes last, as in the registry
    expected = generate_latest(m.registry)
    formatting = m.snapshot()
    logs[0].size = 999
    logs.append(FakeLog("t", 1))
    assert formatting() == expected
    assert m.render() == generate_latest(m.registry) != expected
