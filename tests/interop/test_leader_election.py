"""ElectLeaders (S-6.1) driven by real admin clients: kafka-python's KafkaAdminClient.elect_leaders
and confluent-kafka's AdminClient.elect_leaders, against an in-process 3-broker cluster whose
leadership was skewed by a broker restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.cluster import Cluster


def _state(cluster: Cluster, topic: str, p: int) -> dict[str, Any]:
    path = f"/brokers/topics/{topic}/partitions/{p}/state"
    return json.loads(cluster.zookeeper.dump(path)[path])


@pytest.fixture(scope="module")
def skewed() -> Iterator[tuple[Cluster, int, int]]:
    """Topic "e": partitions 0 and 1 prefer broker a, which was restarted, so b leads them."""
    from odradek.client import Admin
    from odradek.client.types import NewTopic

    cluster = Cluster(3, overrides={"auto.leader.rebalance.enable": "false"}).start()
    try:
        ctl = cluster.controller_id()
        a, b = [x for x in range(3) if x != ctl]
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("e", replica_assignment={
                0: [a, b, ctl], 1: [a, ctl, b], 2: [b, a, ctl]})])
            admin.wait_for_topics(["e"], 60)
        cluster.stop_broker(a)
        cluster.wait_for(lambda: all(_state(cluster, "e", p)["leader"] != a for p in (0, 1)), 60)
        cluster.start_broker(a)
        cluster.wait_for(lambda: all(a in _state(cluster, "e", p)["isr"] for p in range(3)), 60)
        yield cluster, a, b
    finally:
        cluster.stop()


def test_elect_leaders_kafka_python(skewed: tuple[Cluster, int, int]) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

    cluster, a, _b = skewed
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert _state(cluster, "e", 0)["leader"] != a
        response = admin.elect_leaders(0, {"e": [0, 2]}, timeout_ms=20000)
        codes = {(r.topic, p.partition_id): p.error_code
                 for r in response.replica_election_results for p in r.partition_result}
        assert codes == {("e", 0): 0, ("e", 2): 84}  # 84: ELECTION_NOT_NEEDED
        assert _state(cluster, "e", 0)["leader"] == a
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.elect_leaders(0, {"missing": [0]}, timeout_ms=20000)
    finally:
        admin.close()


def test_elect_leaders_confluent(skewed: tuple[Cluster, int, int]) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    cluster, a, _b = skewed
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert _state(cluster, "e", 1)["leader"] != a
    # No request_timeout/operation_timeout: confluent-kafka 2.16.1 fails on them client-side
    # (TypeError / SystemError in its C binding), whatever the broker.
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("e", 1)]
                                  ).result(timeout=60)
    assert [(tp.topic, tp.partition, err) for tp, err in results.items()] == [("e", 1, None)]
    assert _state(cluster, "e", 1)["leader"] == a
    results = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("e", 1)]
                                  ).result(timeout=60)
    (err,) = results.values()
    assert isinstance(err, KafkaError) and err.code() == KafkaError.ELECTION_NOT_NEEDED
