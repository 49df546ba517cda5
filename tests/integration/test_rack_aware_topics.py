"""`broker.rack` at topic creation (KIP-36): when every live broker has a rack, CreateTopics and
CreatePartitions place each partition's replicas in as many racks as the replication factor
allows (Kafka's rack-aware assignment); a cluster where only some brokers have a rack refuses
automatic assignment with Kafka's message, as Kafka does."""

from __future__ import annotations

import pytest

from odradek.client import Admin
from odradek.client.errors import KafkaError
from odradek.cluster import Cluster

pytestmark = pytest.mark.timeout(120)


def test_replicas_span_the_racks() -> None:
    racks = {0: "rack-a", 1: "rack-a", 2: "rack-b", 3: "rack-b"}
    overrides = {b: {"broker.rack": r} for b, r in racks.items()}
    with Cluster(brokers=4, broker_overrides=overrides, http=False) as cluster, \
            Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topic("spread", num_partitions=8, replication_factor=2)
        admin.create_partitions({"spread": 12})
        cluster.wait_for(lambda: len(admin.describe_topics(["spread"])["spread"].partitions)
                         == 12, what="12 partitions")
        parts = admin.describe_topics(["spread"])["spread"].partitions
        for p in parts:
            assert {racks[b] for b in p.replicas} == {"rack-a", "rack-b"}, (p.partition,
                                                                          p.replicas)
        leaders = [p.replicas[0] for p in parts]
        assert sorted(set(leaders)) == [0, 1, 2, 3]  # preferred leaders spread over all


def test_some_brokers_without_a_rack_refuse_automatic_assignment() -> None:
    with Cluster(brokers=2, broker_overrides={0: {"broker.rack": "rack-a"}},
                 http=False) as cluster, \
            Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin, \
            pytest.raises(KafkaError, match="Not all brokers have rack information"):
        admin.create_topic("mixed", num_partitions=2, replication_factor=2)
