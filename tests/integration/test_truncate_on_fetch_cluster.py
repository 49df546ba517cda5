"""Truncation on fetch (KIP-320) end to end, on an in-process 2-broker cluster over the wire: logs
made to diverge by an unclean election, then the old leader, back as a follower, truncates from
its new leader's `diverging_epoch` answer without any OffsetForLeaderEpoch request and ends with
the same log as the leader.

A leads, B follows; 5 records reach both (epoch 0). B stops (leaves the ISR, epoch 1); A takes 3
records with acks=1 (offsets 5-7, epoch 1). A stops; B starts and is elected uncleanly (epoch 2)
and takes 2 records (offsets 5-6). A starts and follows B: it fetches at 8 with last fetched
epoch 1, B answers that its epoch <= 1 is 0, ending at 5, and A truncates to 5 and fetches B's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.client import Admin, NewTopic, Producer
from odradek.cluster import Cluster
from odradek.protocol.records import decode_records, iter_headers

pytestmark = pytest.mark.timeout(120)

TOPIC = "diverge"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=2, http=False,
                 overrides={"unclean.leader.election.enable": "true",
                            "replica.fetch.wait.max.ms": "100",
                            "auto.leader.rebalance.enable": "false",
                            "offsets.topic.replication.factor": "1"}) as c:
        yield c


def produce(cluster: Cluster, values: list[bytes], acks: str) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks}) as p:
        for v in values:
            p.send(TOPIC, v, partition=0)
        assert p.flush(30) == 0


def records(cluster: Cluster, broker_id: int) -> list[tuple[int, int, bytes]]:
    """(offset, leader epoch, value) of the broker's replica of diverge-0."""
    log = cluster.brokers[broker_id].replica_manager.partitions[(TOPIC, 0)].log
    data = log.read(log.log_start_offset, 1 << 20).read_bytes()
    return [(r.offset, h.partition_leader_epoch, r.value or b"") for h in iter_headers(data)
            for r in decode_records(data[h.position:h.position + h.size])]


def leader_of(cluster: Cluster, broker_id: int) -> int:
    info = cluster.brokers[broker_id].metadata_cache.partition(TOPIC, 0)
    return -1 if info is None else info.leader


def test_old_leader_truncates_from_the_diverging_epoch(cluster: Cluster) -> None:
    a, b = 0, 1
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(TOPIC, replica_assignment={0: [a, b]})])
        admin.wait_for_topics([TOPIC], 30)
    produce(cluster, [b"m%d" % i for i in range(5)], "all")

    cluster.stop_broker(b)
    cluster.wait_for(lambda: cluster.brokers[a].replica_manager.partitions[(TOPIC, 0)].isr
                     == [a], what="B out of the ISR")
    produce(cluster, [b"a%d" % i for i in range(5, 8)], "1")  # only A has them
    cluster.stop_broker(a)
    cluster.start_broker(b)  # alone: elected uncleanly
    cluster.wait_for(lambda: leader_of(cluster, b) == b, 30, what="B leading")
    produce(cluster, [b"b5", b"b6"], "1")

    cluster.start_broker(a)
    cluster.wait_for(lambda: (TOPIC, 0) in cluster.brokers[a].replica_manager.partitions
                     and records(cluster, a) == records(cluster, b), 30,
                     what="A's log equal to B's")
    values = [v for _, _, v in records(cluster, a)]
    assert values == [b"m0", b"m1", b"m2", b"m3", b"m4", b"b5", b"b6"]
    fetchers = cluster.brokers[a].replica_manager.fetcher_manager.fetchers.values()
    assert sum(f.truncations_on_fetch for f in fetchers) >= 1
    assert sum(f.epoch_requests for f in fetchers) == 0
