"""Topic ids in Fetch (KIP-516), diverging epochs (KIP-320) and position validation after a
leader change, with real clients on an in-process 3-broker cluster.

* confluent-kafka (librdkafka 2.16) fetches with Fetch v16 (topics by id) when offered, with and
  without a consumer group; kcat reads the same topic.
* A partition leader is killed mid-consumption: the confluent-kafka consumer (which validates its
  position with OffsetForLeaderEpoch, replica id -1, after a leader change) goes on from the new
  leader with every record once, in order; the followers moved to the new leader without any
  OffsetForLeaderEpoch request of their own (truncation on fetch).
* A Fetch v16 sent to a broker that is not a replica is NOT_LEADER_OR_FOLLOWER naming the
  current leader and its endpoint (KIP-951).
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster import Cluster
from odradek.protocol.codec import make
from tests.integration.broker_harness import req_module
from tests.interop.clients import In, consume_confluent, consume_kcat
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=3, http=False,
                 overrides={"replica.fetch.wait.max.ms": "100",
                            "auto.leader.rebalance.enable": "false"}) as c:
        yield c


class FetchVersions(logging.Handler):
    """Collects the Fetch versions librdkafka logs with debug=protocol."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.versions: set[int] = set()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        marker = "Sent FetchRequest (v"
        i = msg.find(marker)
        if i >= 0:
            self.versions.add(int(msg[i + len(marker):].split(",")[0]))


def debug_logger(name: str) -> tuple[logging.Logger, FetchVersions]:
    logger = logging.getLogger(f"rdkafka.{name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = FetchVersions()
    logger.addHandler(handler)
    return logger, handler


def make_topic(cluster: Cluster, partitions: int, values: list[bytes],
               configs: dict[str, str] | None = None, replication_factor: int = 3) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"ids-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, replication_factor,
                                  config=configs or {})])[topic].result(30)
    cluster.wait_for(lambda: all(
        b.metadata_cache.partition(topic, p) is not None
        for b in cluster.brokers.values() if b.started for p in range(partitions)),
        what="the topic in every metadata cache")
    produce(cluster, topic, values)
    return topic


def produce(cluster: Cluster, topic: str, values: list[bytes], partition: int | None = None
            ) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    for i, v in enumerate(values):
        if partition is None:
            p.produce(topic, v, key=str(i).encode())
        else:
            p.produce(topic, v, partition=partition)
    assert p.flush(30) == 0


def test_confluent_consumer_fetches_v16_by_topic_id(cluster: Cluster) -> None:
    values = [b"v%d" % i for i in range(30)]
    topic = make_topic(cluster, 3, values)
    logger, seen = debug_logger("assign")
    got = consume_confluent(cluster.bootstrap_servers, topic, 3, 30,
                            extra={"debug": "protocol", "logger": logger})
    assert sorted(m.value for m in got) == sorted(values)
    assert seen.versions == {16}

    from confluent_kafka import Consumer  # with a group: subscribe, rebalance, commit
    logger, seen = debug_logger("group")
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "debug": "protocol", "logger": logger})
    out: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(out) < 30 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                out.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted(out) == sorted(values)
    assert seen.versions == {16}
    assert sorted(m.value for m in consume_kcat(cluster.bootstrap_servers, topic, 3, 30)) \
        == sorted(values)


def test_leader_killed_mid_consumption(cluster: Cluster) -> None:
    """The consumer validates its position with the new leader (OffsetForLeaderEpoch, replica
    id -1) and continues: every record once, in order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    first = [b"a%d" % i for i in range(40)]
    topic = make_topic(cluster, 1, first, {"min.insync.replicas": "2"})
    leader = cluster.brokers[0].metadata_cache.partition(topic, 0).leader
    before = {b: epoch_requests_received(cluster, b) for b in cluster.brokers}
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{topic}",
                  "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500,
                  "fetch.wait.max.ms": 100})
    got: list[In] = []

    def poll_until(n: int, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error() is not None:  # transient errors are reported, not fatal
                continue
            got.append(In(m.partition(), m.offset(), m.key(), m.value(), (), 0))
        assert len(got) >= n, f"consumed {len(got)} of {n}"

    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        poll_until(20)
        cluster.kill_broker(leader)
        cluster.wait_for(lambda: new_leader(cluster, topic, leader) is not None, 30,
                         what="a new leader")
        second = [b"b%d" % i for i in range(40)]
        produce(cluster, topic, second, partition=0)
        poll_until(80)
    finally:
        c.close()
    assert [m.value for m in got] == first + second  # no loss, no duplicates, in order
    assert [m.offset for m in got] == list(range(80))
    now_leader = new_leader(cluster, topic, leader)
    assert now_leader is not None
    # librdkafka validated its position with the new leader (OffsetForLeaderEpoch, -1)
    assert epoch_requests_received(cluster, now_leader) > before[now_leader]

    cluster.start_broker(leader)
    cluster.wait_for(lambda: sorted(cluster.brokers[now_leader].replica_manager.partitions[
        (topic, 0)].isr) == [0, 1, 2], 60, what="the restarted broker back in the ISR")
    # every follower (the restarted one included) started fetching the new leader without
    # an OffsetForLeaderEpoch request: truncation happens on fetch (KIP-320)
    assert sum(f.epoch_requests for b in cluster.brokers.values() if b.started
               for f in b.replica_manager.fetcher_manager.fetchers.values()) == 0


def test_fetch_v16_at_another_broker_names_the_leader(cluster: Cluster) -> None:
    """KIP-951: a broker that is not the partition's replica answers NOT_LEADER_OR_FOLLOWER
    (the topic is in its metadata cache) with the current leader and its endpoint."""
    topic = make_topic(cluster, 1, [b"x"], replication_factor=1)
    live = [b for b, br in cluster.brokers.items() if br.started]
    info = cluster.brokers[live[0]].metadata_cache.partition(topic, 0)
    tid = cluster.brokers[live[0]].metadata_cache.topic(topic).topic_id
    other = next(b for b in live if b not in info.replicas)
    m = req_module(1, 16)
    request = make(
        m.FetchRequest, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(make(m.FetchTopic, topic_id=tid, partitions=(make(
            m.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")

    async def ask() -> Any:
        c = await WireClient.connect("127.0.0.1", cluster.ports[other])
        try:
            return await c.request(request)
        finally:
            await c.close()
    r = cluster.run(ask())
    part = r.responses[0].partitions[0]
    assert r.responses[0].topic_id == tid
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == \
        (info.leader, info.leader_epoch)
    assert [(n.node_id, n.port) for n in r.node_endpoints] == \
        [(info.leader, cluster.ports[info.leader])]


def new_leader(cluster: Cluster, topic: str, old: int) -> int | None:
    for b in cluster.brokers.values():
        if b.started:
            info = b.metadata_cache.partition(topic, 0)
            if info is not None and info.leader not in (-1, old) and info.leader in \
                    [x for x, br in cluster.brokers.items() if br.started]:
                return info.leader
    return None


def epoch_requests_received(cluster: Cluster, broker_id: int) -> int:
    broker = cluster.brokers[broker_id]
    t = broker.metrics.requests.by_name.get("OffsetForLeaderEpoch")
    return 0 if t is None else t.requests
