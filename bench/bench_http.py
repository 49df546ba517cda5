"""The HTTP listener with 10,000 partitions: response times of GET /metrics,
/api/topics, /api/cluster and a topic's page, and how late the broker's event loop runs while
they are served.

A real in-process `odradek.Cluster` (one broker, its HTTP listener on; RF 1: creating 10,000
partitions of RF 3 on three in-process brokers takes too long on a small machine) with 100
topics of 100 partitions, a few records in each topic. For each route, `--requests` sequential
GETs from this process (urllib, the body read and dropped), while a probe on the broker's event
loop sleeps 2 ms at a time and records how much later than asked it woke up (the loop's lag:
what every Kafka connection of the broker waits meanwhile). /metrics is measured twice,
alternating: as the listener serves it (the numbers read on the loop, the text formatted in a
worker thread) and with the formatting forced back onto the loop (how it was before), so the
two rows show what moving the formatting off the loop changed.

Usage::

    python bench/bench_http.py                      # markdown to stdout
    python bench/bench_http.py --quick              # 1,000 partitions, 5 requests: a smoke test
    python bench/bench_http.py --update-doc docs/performance.md
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_section_options, fmt_int, machine_facts, progress, run_section, table

BEGIN = "<!-- bench_http:begin -->"
END = "<!-- bench_http:end -->"
PROBE_S = 0.002


@dataclass
class Row:
    route: str
    times_ms: list[float] = field(default_factory=list)
    lag_ms: list[float] = field(default_factory=list)
    size: int = 0


@dataclass
class Result:
    started: float
    facts: dict[str, str]
    partitions: int
    create_s: float = 0.0
    idle_lag_ms: list[float] = field(default_factory=list)
    rows: dict[str, Row] = field(default_factory=dict)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class LoopProbe:
    """Sleeps PROBE_S at a time on the broker's loop and keeps how late each wake-up was."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._future: Any = None

    async def _run(self) -> None:
        clock = time.perf_counter
        while not self._stop.is_set():
            t0 = clock()
            await asyncio.sleep(PROBE_S)
            self.samples.append((clock() - t0 - PROBE_S) * 1000)

    def __enter__(self) -> LoopProbe:
        self._future = asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._future.result(10)


def get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as resp:
        body = resp.read()
        assert resp.status == 200, (url, resp.status)
    return (time.perf_counter() - t0) * 1000, len(body)


def run(a: argparse.Namespace) -> Result:
    from odradek import Cluster
    from odradek.client import Admin, NewTopic, Producer

    logging.getLogger("state.change.logger").setLevel(logging.WARNING)
    res = Result(time.monotonic(), machine_facts(), a.partitions)
    topics = max(1, a.partitions // 100)
    per_topic = a.partitions // topics
    cluster = Cluster(1, overrides={"num.partitions": str(per_topic)}).start()
    try:
        progress(f"creating {topics} topics of {per_topic} partitions (RF 1)")
        t0 = time.monotonic()
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            names = [f"topic-{i:03d}" for i in range(topics)]
            for i in range(0, len(names), 10):
                admin.create_topics([NewTopic(n, per_topic, 1) for n in names[i:i + 10]])
                admin.wait_for_topics(names[i:i + 10], 600)
        res.create_s = time.monotonic() - t0
        progress(f"created in {res.create_s:.0f} s; a few records per topic")
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
            for n in names:
                for p in range(0, per_topic, 10):
                    producer.send(n, b"x" * 100, partition=p)
            producer.flush(120)
        broker = cluster.brokers[0]
        listener = broker.http_listener
        assert listener is not None
        base = listener.url
        loop = cluster.loop  # the loop every in-process broker runs on
        formatted_off_loop = listener.render_metrics
        assert formatted_off_loop is not None

        def formatted_on_loop() -> Any:  # the text made on the loop, as before
            data = formatted_off_loop()()
            return lambda: data

        progress("idle loop lag")
        with LoopProbe(loop) as probe:
            time.sleep(2)
        res.idle_lag_ms = probe.samples
        routes = [("/metrics (formatted in a thread)", "/metrics", formatted_off_loop),
                  ("/metrics (formatted on the loop, before)", "/metrics", formatted_on_loop),
                  ("/api/topics", "/api/topics", None),
                  ("/api/cluster", "/api/cluster", None),
                  (f"/api/topics/{names[0]} ({per_topic} partitions)",
                   f"/api/topics/{names[0]}", None)]
        for label, _path, _ in routes:
            res.rows[label] = Row(label)
        get(base + "/api/topics")  # the admin client connected
        for rnd in range(a.requests):
            order = routes if rnd % 2 == 0 else [routes[1], routes[0], *routes[2:]]
            for label, path, render in order:
                if render is not None:
                    listener.render_metrics = render
                row = res.rows[label]
                with LoopProbe(loop) as probe:
                    ms, size = get(base + path)
                row.times_ms.append(ms)
                row.lag_ms.extend(probe.samples)
                row.size = size
            if rnd % 5 == 4:
                progress(f"{rnd + 1}/{a.requests} rounds")
        listener.render_metrics = formatted_off_loop
    finally:
        cluster.stop()
    return res


def render(res: Result, a: argparse.Namespace) -> str:
    lines = [BEGIN, "## The HTTP endpoint with 10,000 partitions (bench/bench_http.py)", "",
             f"`python bench/bench_http.py --partitions {a.partitions} --requests {a.requests}`"
             f" ({time.strftime('%Y-%m-%d')})", ""]
    lines += [f"- {k}: {v}" for k, v in res.facts.items()]
    lines += ["", f"One in-process broker (`odradek.Cluster(1)`) hosting {fmt_int(res.partitions)}"
              f" partitions of RF 1 (100 partitions per topic; created in {res.create_s:.0f} s), "
              "its HTTP listener asked by one client in this process, one request at a time, "
              f"{a.requests} requests per route, the routes interleaved. Loop lag: how much later "
              f"than asked a {PROBE_S * 1000:.0f} ms sleep on the broker's event loop woke up "
              "during the requests (every Kafka request of the broker waits as long). Idle: "
              f"median {statistics.median(res.idle_lag_ms):.2f} ms, "
              f"p99 {pct(res.idle_lag_ms, 0.99):.2f} ms.", ""]
    lines += ["The /api routes ask the broker over the Kafka protocol, as any client would: their "
              "dearest part is a Metadata request of every topic, which the broker encodes on its "
              "event loop (and which the listener's admin client, on the same loop in this "
              "in-process cluster, decodes); the listener shares that answer for 1 s per user, so "
              "/api/cluster right after /api/topics reuses it. /metrics reads its numbers on the "
              "loop and formats 41,000 samples in a worker thread; the second /metrics row forces "
              "the formatting back onto the loop, as before, for comparison. The load average "
              "above says how much other work shared the 2 cores: the figures scale with it.", ""]
    rows = []
    for row in res.rows.values():
        t, lag = row.times_ms, row.lag_ms
        rows.append([row.route, f"{row.size / 1e6:.2f} MB" if row.size > 1e5 else
                     f"{row.size / 1e3:.1f} kB", f"{statistics.median(t):.0f}",
                     f"{pct(t, 0.99):.0f}", f"{statistics.median(lag):.2f}",
                     f"{pct(lag, 0.99):.1f}", f"{max(lag):.1f}"])
    lines.append(table(["GET", "answer", "median ms", "p99 ms", "loop lag median ms",
                        "loop lag p99 ms", "loop lag max ms"], rows, "lrrrrrr"))
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="1,000 partitions, 5 requests")
    add_section_options(ap, "bench_http")
    a = ap.parse_args()
    if a.quick:
        a.partitions, a.requests = 1_000, 5
    run_section(a, "http", run, render, BEGIN, END)


if __name__ == "__main__":
    main()
