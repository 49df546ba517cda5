"""A confluent-kafka transactional producer whose consumer group's coordinator left the cluster
between two transactions: the next send_offsets_to_transaction must reach the new coordinator.

librdkafka (2.16 here) keeps the dead coordinator in its coordinator cache after dropping the
broker's handle (it left the Metadata response, as a dead broker does in Kafka), and waits for
that handle to come up until another broker connection changes state: confluentinc/librdkafka
#5511. odradek's exactly-once pipeline (odradek.chaos.scenarios.txn_pipeline.producer_config)
# closes idle
connections after 5 s, which makes such a change happen. This test pins that: the same steps
with `connections.max.idle.ms` 0 (librdkafka's default) blocked in send_offsets_to_transaction
past its 30 s timeout (also a librdkafka bug, #5456) in one of two runs: the hang depends on
whether librdkafka dropped the handle before the TxnOffsetCommit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.chaos.scenarios.txn_pipeline import IDLE_CLOSE_MS, producer_config
from odradek.cluster import Cluster
from odradek.coordinator.offsets import partition_for

pytestmark = pytest.mark.timeout(180)

GROUP = "moving-group"


@pytest.fixture()
def cluster() -> Iterator[Cluster]:
    c = Cluster(3, overrides={
        "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
        "transaction.state.log.num.partitions": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield c
    finally:
        c.stop()


def _group_coordinator(cluster: Cluster) -> int:
    """The leader of the group's `__consumer_offsets` partition, from ZooKeeper."""
    path = f"/brokers/topics/__consumer_offsets/partitions/{partition_for(GROUP, 3)}/state"
    return int(json.loads(cluster.zookeeper.dump(path)[path])["leader"])


def _call_within(fn: Any, limit_s: float) -> tuple[bool, BaseException | None, float]:
    """Run `fn` in a daemon thread: (returned within `limit_s`, what it raised, seconds)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t0 = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    return bool(outcome), (outcome[0] if outcome else None), time.monotonic() - t0


def test_send_offsets_reaches_the_new_group_coordinator(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 3) for t in ("txin", "txout")]).values():
        f.result(30)
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        seed.produce("txin", value=f"v{i}".encode())
    assert seed.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 30000})
    producer = Producer(producer_config(bootstrap, "moving-tid"))
    assert producer_config(bootstrap, "t")["connections.max.idle.ms"] == IDLE_CLOSE_MS
    try:
        consumer.subscribe(["txin"])
        producer.init_transactions(30)

        def one_transaction(n: int) -> None:
            msgs: list[Any] = []
            deadline = time.monotonic() + 30
            while len(msgs) < n and time.monotonic() < deadline:
                msgs += [m for m in consumer.consume(n - len(msgs), 0.5) if m.error() is None]
            assert len(msgs) == n
            producer.begin_transaction()
            for m in msgs:
                producer.produce("txout", value=b"out:" + m.value())
            assert producer.flush(30) == 0
            positions = consumer.position(consumer.assignment())
            done, exc, took = _call_within(lambda: producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), 30), 60)
            assert done, f"send_offsets_to_transaction still blocked after {took:.0f} s"
            assert exc is None, exc
            producer.commit_transaction(30)

        # The first transaction puts the group's coordinator in librdkafka's cache.
        one_transaction(10)
        old = _group_coordinator(cluster)
        cluster.stop_broker(old)
        cluster.wait_for(lambda: _group_coordinator(cluster) not in (old, -1), 60,
                         "a new group coordinator")
        # The producer's next Metadata response lacks the stopped broker: librdkafka drops
        # its handle (the step after which #5511 blocks).
        producer.list_topics(timeout=10)
        one_transaction(10)

        committed = consumer.committed(consumer.assignment(), timeout=30)
        assert [tp.offset for tp in committed] == [20]
    finally:
        consumer.close()
