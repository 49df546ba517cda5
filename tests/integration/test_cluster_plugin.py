"""The pytest plugin and the synchronous Cluster, with a real client."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster import Cluster


@pytest.mark.odradek_cluster(brokers=1)
def test_fixture_gives_a_running_cluster_a_client_can_use(odradek_cluster: Cluster) -> None:
    servers = odradek_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})  # keep it alive for its futures
    admin.create_topics([NewTopic("plug", 1, 1)])["plug"].result(20)
    p = Producer({"bootstrap.servers": servers})
    p.produce("plug", b"v", key=b"k")
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": servers, "group.id": "plugin-test",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("plug", 0, 0)])
    msg = c.poll(20)
    c.close()
    assert msg is not None and msg.error() is None and msg.value() == b"v"


def test_factory_kill_and_restart_keep_addresses(odradek_cluster_factory) -> None:
    cluster = odradek_cluster_factory(brokers=2)
    before = cluster.bootstrap_servers
    victim = cluster.controller_id()
    cluster.kill_broker(victim)
    cluster.wait_for(lambda: cluster.controller_id() not in (-1, victim), 30, "new controller")
    cluster.restart_broker(victim)
    assert cluster.bootstrap_servers == before
    assert cluster.live_brokers() == [0, 1]
