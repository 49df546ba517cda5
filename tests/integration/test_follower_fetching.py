"""Follower fetching (KIP-392) with a real consumer: brokers in three racks with
`replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`; a
confluent-kafka consumer whose `client.rack` is a follower's rack is sent there by the leader
(`preferred_read_replica`) and reads every record from that follower, which serves it below its
high watermark: the follower's BytesOut for the topic moves and the leader's does not. Without
a selector, or with a client rack no replica has, the leader serves. A consumer waiting on the
follower gets a new record once the follower's high watermark covers it (the replica fetcher
completes its delayed fetch, Kafka 3.4's completeDelayedFetchRequests), not at its
`fetch.wait.max.ms`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from odradek.client import Admin, NewTopic, Producer
from odradek.cluster import Cluster

pytestmark = pytest.mark.timeout(180)

RACKS = {0: "rack-a", 1: "rack-b", 2: "rack-c"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    overrides = {b: {"broker.rack": r} for b, r in RACKS.items()}
    with Cluster(brokers=3, broker_overrides=overrides, http=False,
                 overrides={"replica.selector.class": SELECTOR,
                            "replica.fetch.wait.max.ms": "100"}) as c:
        yield c


def bytes_out(cluster: Cluster, broker_id: int, topic: str) -> float:
    async def render() -> bytes:
        return cluster.brokers[broker_id].metrics.render()
    text = cluster.run(render()).decode()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "kafka_server_brokertopicmetrics_bytesout_total"
               and s.labels.get("topic") == topic)


def topic_with_records(cluster: Cluster, n: int) -> tuple[str, int, list[int]]:
    topic = f"ff-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 1, 3)])
        admin.wait_for_topics([topic], 30)
        part = admin.describe_topics([topic])[topic].partitions[0]
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as p:
        for i in range(n):
            p.send(topic, f"v{i}".encode(), key=str(i).encode())
        assert p.flush(30) == 0
    # every replica's high watermark reaches the end, so a follower can serve it all
    cluster.wait_for(lambda: all(
        cluster.brokers[b].replica_manager.partitions[(topic, 0)].high_watermark == n
        for b in part.replicas), what="the followers' high watermarks")
    return topic, part.leader, [b for b in part.replicas if b != part.leader]


def consume_all(cluster: Cluster, topic: str, n: int, **conf: Any) -> list[bytes]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                  "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **conf})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        for _ in range(600):
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) >= n:
                break
    finally:
        c.close()
    return got


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster: Cluster) -> None:
    n = 300
    topic, leader, followers = topic_with_records(cluster, n)
    target = followers[0]
    got = consume_all(cluster, topic, n, **{"client.rack": RACKS[target]})
    assert got == [f"v{i}".encode() for i in range(n)]
    assert bytes_out(cluster, target, topic) > 0
    assert bytes_out(cluster, leader, topic) == 0  # the leader only said where to go


def test_no_replica_in_the_client_rack_means_the_leader(cluster: Cluster) -> None:
    n = 50
    topic, leader, followers = topic_with_records(cluster, n)
    got = consume_all(cluster, topic, n, **{"client.rack": "rack-elsewhere"})
    assert len(got) == n
    assert bytes_out(cluster, leader, topic) > 0
    assert all(bytes_out(cluster, f, topic) == 0 for f in followers)


def test_a_consumer_waiting_on_the_follower_gets_a_new_record_before_its_max_wait(
        cluster: Cluster) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as Tp

    max_wait_ms = 20_000  # waiting it out would take 20 s; the record must come well before
    topic, leader, followers = topic_with_records(cluster, 1)
    target = followers[0]
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                  "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "client.rack": RACKS[target], "fetch.wait.max.ms": max_wait_ms})
    try:
        c.assign([Tp(topic, 0, 0)])
        first = None
        deadline = time.monotonic() + 60
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                first = m
        assert first is not None and first.value() == b"v0"
        cluster.wait_for(lambda: bytes_out(cluster, target, topic) > 0,
                         what="the consumer fetching from the follower")
        time.sleep(1.0)  # its next fetch is parked on the follower, nothing to read
        with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                       "linger.ms": 0}) as p:
            sent = time.monotonic()
            p.send(topic, b"late", partition=0)
            assert p.flush(30) == 0
        got = None
        while got is None and time.monotonic() - sent < 30:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got = m
        waited = time.monotonic() - sent
    finally:
        c.close()
    assert got is not None and got.value() == b"late"
    assert bytes_out(cluster, leader, topic) == 0  # it was the follower that served it
    assert waited < 10, f"the record took {waited:.1f} s: the fetch waited out its max wait"
