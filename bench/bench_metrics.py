"""What the metrics cost: the produce path with recording on and off, the recorders
per call, and a scrape (`BrokerMetrics.render()`) of a broker hosting 10,000 partitions.

1. `odradek broker` subprocesses, alternately with `metrics.recording.enabled=true` and
   `false`, each fed the same confluent-kafka produce loop (100-byte records, linger.ms=5,
   acks=1, a 6-partition topic): records/s and the broker's CPU microseconds per record
   (utime+stime from /proc). Rounds alternate; the table gives the median of each mode.
2. The recorders alone, in this process (timeit): one Produce append's topic counts, one Fetch
   partition's, one request's timing.
3. render() of a BrokerMetrics whose collectors read a synthetic state of 10,000 partitions
   (10,000 leaders and logs, a controller context of 10,000 partitions, 100 topics' counters):
   the median of several scrapes, and the exposition's size.

Usage::

    python bench/bench_metrics.py                      # markdown to stdout
    python bench/bench_metrics.py --quick              # small counts, a smoke test
    python bench/bench_metrics.py --update-doc docs/metrics.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BrokerProcess,
    add_section_options,
    cpu_seconds,
    ensure_topic,
    fmt_int,
    machine_facts,
    produce_records,
    progress,
    run_section,
    table,
)

BEGIN = "<!-- bench_metrics:begin -->"
END = "<!-- bench_metrics:end -->"
PARTITIONS = 10_000


@dataclass
class Result:
    started: float
    facts: dict[str, str]
    records: int
    # (scenario, "on"|"off") -> [(records/s, broker CPU us/record)]
    rounds: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)
    recorder_ns: dict[str, float] = field(default_factory=dict)
    render_ms: list[float] = field(default_factory=list)
    render_bytes: int = 0
    render_samples: int = 0


#: (name, producer settings, share of --records): big batches (the per-record cost) and small
#: ones (about 20 records a batch: many more requests, so the per-request cost shows)
SCENARIOS: tuple[tuple[str, dict[str, Any], float], ...] = (
    ("batch.size=1000000, linger.ms=5", {"batch.size": 1_000_000, "linger.ms": 5}, 1.0),
    ("batch.size=2000, linger.ms=0", {"batch.size": 2000, "linger.ms": 0}, 0.2),
)


def produce_round(recording: bool, records: int, settings: dict[str, Any]
                  ) -> tuple[float, float]:
    from confluent_kafka import Producer

    overrides = {"metrics.recording.enabled": str(recording).lower(), "num.partitions": "6"}
    with BrokerProcess(overrides=overrides) as broker:
        ensure_topic(broker.bootstrap, "bench", 6)
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1,
                      "queue.buffering.max.messages": 1_000_000, "log_level": 0, **settings})
        produce_records(p, "bench", b"x" * 100, 1000)  # warm up: connections, metadata
        p.flush(30)
        cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        produce_records(p, "bench", b"x" * 100, records)
        if p.flush(120) != 0:
            raise RuntimeError("records left unsent")
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(broker.pid) - cpu0
    return records / elapsed, cpu / records * 1e6


def recorder_costs() -> dict[str, float]:
    from odradek.metrics.stats import RequestStats, TopicStats

    topics, requests = TopicStats(), RequestStats()
    timer = requests.timer("Produce")
    n = 200_000
    out = {}
    for name, stmt in (
            ("produce append (record_append)", lambda: topics.record_append("t", 10, 1000)),
            ("fetch partition (record_fetch)", lambda: topics.record_fetch("t", 1000, False,
                                                                           False)),
            ("request timing (RequestTimer.record)", lambda: timer.record(0.0001, 0.0002)),
            ("empty call (reference)", lambda: None)):
        out[name] = min(timeit.repeat(stmt, number=n, repeat=5)) / n * 1e9
    return out


@dataclass
class _P:
    topic: str
    index: int
    replicas: list[int]
    isr: list[int]
    is_leader: bool = True


@dataclass
class _L:
    topic: str
    partition: int
    size: int
    num_segments: int
    log_start_offset: int
    log_end_offset: int


@dataclass
class _Lai:
    leader: int


@dataclass
class _Ctx:
    all_topics: set[str]
    partition_assignments: dict[str, dict[int, list[int]]]
    partition_leadership: dict[Any, Any]
    topics_to_be_deleted: set[str] = field(default_factory=set)

    def partitions_with_offline_leader(self) -> set[Any]:
        return set()


class _Purgatory:
    def watched(self) -> int:
        return 0

    def delayed(self) -> int:
        return 0


def render_cost(scrapes: int) -> tuple[list[float], int, int]:
    from prometheus_client.parser import text_string_to_metric_families

    from odradek.metrics.registry import BrokerMetrics

    topics = [f"topic-{i:03d}" for i in range(100)]
    tps = [(topics[i % 100], i // 100) for i in range(PARTITIONS)]
    parts = [_P(t, p, [0, 1, 2], [0, 1, 2]) for t, p in tps]
    logs = [_L(t, p, 1 << 20, 1, 0, 1000) for t, p in tps]
    assignments: dict[str, dict[int, list[int]]] = {}
    for t, p in tps:
        assignments.setdefault(t, {})[p] = [0, 1, 2]
    ctx = _Ctx(set(topics), assignments, {tp: _Lai(0) for tp in tps})
    m = BrokerMetrics(0)
    m.register_replica_manager(lambda: parts, lambda _t: 2,
                               {"Produce": _Purgatory(), "Fetch": _Purgatory()}, lambda: 0)
    m.register_logs(lambda: logs)
    m.register_controller(lambda: True, lambda: ctx)
    m.register_groups(lambda: [])
    for t in topics:
        m.topics.record_append(t, 1, 100)
        m.topics.record_fetch(t, 100, False, False)
    for name in ("Produce", "Fetch", "Metadata", "ApiVersions"):
        m.requests.timer(name).record(0.001, 0.002)
    times = []
    text = b""
    for _ in range(scrapes):
        t0 = time.perf_counter()
        text = m.render()
        times.append((time.perf_counter() - t0) * 1000)
    samples = sum(len(f.samples) for f in text_string_to_metric_families(text.decode()))
    return times, len(text), samples


def run(a: argparse.Namespace) -> Result:
    res = Result(time.monotonic(), machine_facts(), a.records)
    for scenario, settings, share in SCENARIOS:
        records = int(a.records * share)
        for r in range(a.rounds):
            for recording in (True, False) if r % 2 == 0 else (False, True):
                mode = "on" if recording else "off"
                progress(f"{scenario} round {r + 1}/{a.rounds}: recording {mode}, "
                         f"{records} records")
                res.rounds.setdefault((scenario, mode), []).append(
                    produce_round(recording, records, settings))
    progress("recorder costs")
    res.recorder_ns = recorder_costs()
    progress(f"render() with {PARTITIONS} partitions")
    res.render_ms, res.render_bytes, res.render_samples = render_cost(a.scrapes)
    return res


def render(res: Result, a: argparse.Namespace) -> str:
    lines = [BEGIN, "## Measurements (bench/bench_metrics.py)", "",
             f"`python bench/bench_metrics.py --records {a.records} --rounds {a.rounds}"
             f" --scrapes {a.scrapes}`", ""]
    lines += [f"- {k}: {v}" for k, v in res.facts.items()]
    lines += ["", "### Produce with metrics recording on and off", "",
              "One `odradek broker` per round, a 6-partition topic, records of 100 bytes from "
              "one confluent-kafka producer (acks=1) on the same machine; medians of the rounds "
              f"({a.rounds} per mode, alternating on/off).", ""]
    rows = []
    for scenario, _, share in SCENARIOS:
        for mode in ("on", "off"):
            rs = res.rounds.get((scenario, mode), [])
            if rs:
                rows.append([scenario, fmt_int(res.records * share),
                             "true" if mode == "on" else "false",
                             fmt_int(statistics.median(x for x, _ in rs)),
                             f"{statistics.median(y for _, y in rs):.2f}",
                             ", ".join(fmt_int(x) for x, _ in rs)])
    lines.append(table(["producer", "records", "`metrics.recording.enabled`", "records/s",
                        "broker CPU us/record", "each round (rec/s)"], rows, "lrlrrr"))
    lines += ["", "### The recorders alone (per call, in-process timeit, best of 5)", ""]
    lines.append(table(["call", "ns"], [[k, f"{v:.0f}"] for k, v in res.recorder_ns.items()],
                       "lr"))
    ms = res.render_ms
    lines += ["", f"### render() with {fmt_int(PARTITIONS)} partitions", "",
              f"Synthetic state: {fmt_int(PARTITIONS)} led partitions and logs, a controller "
              "context of as many, 100 topics' counters; "
              f"{len(ms)} scrapes: median {statistics.median(ms):.0f} ms, min {min(ms):.0f} ms, "
              f"max {max(ms):.0f} ms; {res.render_bytes / 1e6:.1f} MB of text, "
              f"{fmt_int(res.render_samples)} samples.", "", END]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scrapes", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="50,000 records, 1 round, 2 scrapes")
    add_section_options(ap, "bench_metrics")
    a = ap.parse_args()
    if a.quick:
        a.records, a.rounds, a.scrapes = 50_000, 1, 2
    run_section(a, "metrics", run, render, BEGIN, END)


if __name__ == "__main__":
    main()
