"""End-to-end latency through a follower (KIP-392): produce -> a consumer reading from a follower.

Three `odradek broker` processes on a real ZooKeeper (bench_replication.py's `ProcessCluster`),
one in each rack (`broker.rack` rack-0..2) with
`replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`; one topic of
one partition, RF 3, led by broker 0. A confluent-kafka consumer with `client.rack=rack-1` is
sent by the leader to broker 1, a follower (checked: librdkafka's statistics name the broker it
fetches from), and reads with the default `fetch.wait.max.ms` (500). A confluent-kafka producer
(`acks=all`, `linger.ms=0`) sends `--records` records at `--rate` per second, each stamped with
`time.perf_counter_ns()`; the consumer, in the same process, takes the difference on arrival.

A record reaches the consumer once the follower's high watermark covers it: the follower learns
the leader's HW from its next fetch response, then its waiting consumer fetches complete (Kafka
3.4's ReplicaFetcherThread.completeDelayedFetchRequests) — or, without that (Kafka 2.8), when
the consumer's fetch runs out its `fetch.wait.max.ms`.

The odradek measured is the one importable (set PYTHONPATH to a tree's src/ to pick it; the
brokers inherit it)::

    PYTHONPATH=src python bench/bench_follower_fetch.py                # 200 records at 20/s
    PYTHONPATH=src python bench/bench_follower_fetch.py --records 50   # quicker

Prints the odradek used, p50/p99/max (ms) and a markdown row on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replication import ProcessCluster
from common import machine_facts, progress, table

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER, FOLLOWER = 0, 1


def percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_ms) - 1, math.ceil(q / 100 * len(sorted_ms)) - 1))
    return sorted_ms[k]


def create_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"follower-fetch-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 1, replica_assignment=[[LEADER, FOLLOWER, 2]])
    futures = admin.create_topics([topic])
    futures[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every replica in the ISR
        md = admin.list_topics(name, timeout=10).topics[name]
        p = md.partitions.get(0)
        if md.error is None and p is not None and p.leader == LEADER and len(p.isrs) == 3:
            return name
        time.sleep(0.2)
    raise TimeoutError(f"{name}: the ISR never held all three replicas")


class FollowerConsumer(threading.Thread):
    """Polls one partition from the end; records (arrival - stamp) per stamped record and, from
    librdkafka's statistics, which broker it fetches from."""

    def __init__(self, bootstrap: str, topic: str, expected: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.expected = expected
        self.latencies_ms: list[float] = []
        self.fetch_broker: int | None = None
        self.warmed = threading.Event()
        self.stop = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False, "auto.offset.reset": "latest",
            "client.rack": f"rack-{FOLLOWER}", "statistics.interval.ms": 500,
            "stats_cb": self._stats})
        self.topic = topic

    def _stats(self, text: str) -> None:
        p = json.loads(text).get("topics", {}).get(self.topic, {}).get("partitions", {})
        broker = p.get("0", {}).get("broker")
        if isinstance(broker, int) and broker >= 0:
            self.fetch_broker = broker

    def run(self) -> None:
        from confluent_kafka import TopicPartition

        c = self.consumer
        c.assign([TopicPartition(self.topic, 0, 0)])
        try:
            while not self.stop.is_set() and len(self.latencies_ms) < self.expected:
                m = c.poll(0.05)
                now = time.perf_counter_ns()
                if m is None or m.error() is not None:
                    continue
                value = m.value()
                if value.startswith(b"warm"):
                    self.warmed.set()
                    continue
                self.latencies_ms.append((now - int(value)) / 1e6)
        finally:
            c.close()


def measure(bootstrap: str, topic: str, records: int, rate: float) -> dict[str, Any]:
    from confluent_kafka import Producer

    consumer = FollowerConsumer(bootstrap, topic, records)
    consumer.start()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    try:
        deadline = time.monotonic() + 60
        while not (consumer.warmed.is_set() and consumer.fetch_broker == FOLLOWER):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the consumer never fetched from the follower (broker "
                                   f"{consumer.fetch_broker})")
            producer.produce(topic, b"warm", partition=0)
            producer.flush(10)
            time.sleep(0.5)
        progress(f"consumer on broker {consumer.fetch_broker}; {records} records at {rate}/s")
        interval = 1 / rate
        start = time.perf_counter()
        for i in range(records):
            # paced on a fixed schedule, not on the previous send's end
            time.sleep(max(0.0, start + i * interval - time.perf_counter()))
            producer.produce(topic, str(time.perf_counter_ns()).encode(), partition=0)
            producer.poll(0)
        producer.flush(30)
        consumer.join(30 + records / rate)
    finally:
        consumer.stop.set()
        consumer.join(10)
    if len(consumer.latencies_ms) < records:
        raise RuntimeError(f"only {len(consumer.latencies_ms)} of {records} records arrived")
    lat = sorted(consumer.latencies_ms)
    # the last record has no successor whose append would carry the leader's new HW to the
    # follower: it waits for the follower's idle fetch (replica.fetch.wait.max.ms)
    return {"records": len(lat), "fetch_broker": consumer.fetch_broker,
            "p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": lat[-1],
            "mean": sum(lat) / len(lat), "last": consumer.latencies_ms[-1]}


def tree_rev(src: Path) -> str:
    """The git commit of the tree `src` belongs to, "+ changes" when its src/ is modified."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(src), *args], capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    rev = git("rev-parse", "--short", "HEAD")
    if not rev:
        return "?"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return f"git {rev}" + (" + changes" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0, help="records per second")
    ap.add_argument("--label", default="",
                    help="the row's name (default: the git commit of the odradek used)")
    a = ap.parse_args()
    import odradek

    src = Path(odradek.__file__).resolve().parent.parent
    facts = machine_facts()
    progress(f"odradek from {src}")
    overrides = {"replica.selector.class": SELECTOR, "auto.create.topics.enable": "false"}
    racks = {b: {"broker.rack": f"rack-{b}"} for b in range(3)}
    with ProcessCluster(3, overrides, racks) as cluster:
        topic = create_topic(cluster.bootstrap)
        r = measure(cluster.bootstrap, topic, a.records, a.rate)
    rev = tree_rev(src)
    label = a.label or rev
    print(f"odradek: {rev}")
    print(f"date: {facts['date']}; cpus: {facts['cpus']}; {facts['confluent-kafka']}")
    print(f"p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms "
          f"(mean {r['mean']:.1f} ms, {r['records']} records via broker {r['fetch_broker']})")
    print(table(["odradek", "records", "p50 ms", "p99 ms", "max ms", "last record ms"],
                [[label, r["records"], f"{r['p50']:.1f}", f"{r['p99']:.1f}",
                  f"{r['max']:.1f}", f"{r['last']:.1f}"]], "lrrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
