"""Kafka's metrics on an in-process 3-broker cluster, read from each broker's
`broker.metrics.render()` (the Prometheus text): BrokerTopicMetrics move with Produce and Fetch,
RequestMetrics count requests, ActiveControllerCount is 1 on the controller only,
UnderReplicatedPartitions and OfflinePartitionsCount follow brokers killed and restarted, the
ISR meters follow the leaders' ISR changes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.cluster import Cluster
from tests.integration.cluster_fixtures import module_admin, module_cluster

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {"replica.lag.time.max.ms": "1500", "replica.fetch.backoff.ms": "100",
             "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "metrics-cluster", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


def scrape(cluster: Cluster, broker_id: int) -> dict[tuple[str, frozenset[Any]], float]:
    """(sample name, labels) -> value of one broker's exposition, rendered on the cluster's
    loop (the collectors read the broker's state there)."""
    async def render() -> bytes:
        return cluster.brokers[broker_id].metrics.render()
    text = cluster.run(render()).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(cluster: Cluster, broker_id: int, name: str, **labels: str) -> float:
    return scrape(cluster, broker_id).get((name, frozenset(labels.items())), 0.0)


def total(cluster: Cluster, name: str, **labels: str) -> float:
    """Summed over the live brokers."""
    return sum(value(cluster, b, name, **labels) for b in cluster.live_brokers())


def new_topic(admin: Admin, partitions: int = 3, rf: int = 3,
              assignment: dict[int, list[int]] | None = None) -> str:
    name = f"m-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, -1 if assignment else partitions,
                                  -1 if assignment else rf, replica_assignment=assignment)])
    return name


def produce(cluster: Cluster, topic: str, n: int, size: int = 100) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                   "linger.ms": 5}) as p:
        for i in range(n):
            p.send(topic, b"x" * size, key=str(i).encode())
        assert p.flush(30) == 0


def test_produce_and_fetch_move_broker_topic_metrics(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin)
    requests_before = total(cluster, "kafka_network_requestmetrics_requests_total",
                            request="Produce")
    produce(cluster, topic, 200)
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 200
    bytes_in = total(cluster, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert bytes_in >= 200 * 100
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesin_total") >= 200
    assert total(cluster, "kafka_network_requestmetrics_requests_total",
                 request="Produce") > requests_before
    assert total(cluster, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") > 0
    assert total(cluster, "odradek_handler_seconds_count", request="Produce") > 0
    # the followers replicate: replication bytes out on the leaders, not consumer bytes out
    cluster.wait_for(lambda: total(
        cluster, "kafka_server_brokertopicmetrics_replicationbytesout_total") > 0,
        what="replication bytes out")
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == 0

    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        c.seek_to_beginning()
        got: list[Any] = []
        for _ in range(40):
            got += c.poll(0.5)
            if len(got) >= 200:
                break
        assert len(got) == 200
    finally:
        c.close()
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesout_total",
                 topic=topic) >= 200 * 100
    assert total(cluster, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0


def test_one_active_controller(cluster: Cluster, admin: Admin) -> None:
    # a topic of its own: the module's tests may run on other workers, in any order
    new_topic(admin)
    counts = {b: value(cluster, b, "kafka_controller_kafkacontroller_activecontrollercount")
              for b in cluster.live_brokers()}
    assert sorted(counts.values()) == [0, 0, 1]
    controller = cluster.controller_id()
    assert counts[controller] == 1
    deadline = time.monotonic() + 15
    while value(cluster, controller, "kafka_controller_kafkacontroller_globaltopiccount") < 1 \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert value(cluster, controller, "kafka_controller_kafkacontroller_globaltopiccount") >= 1
    assert value(cluster, controller,
                 "kafka_controller_kafkacontroller_globalpartitioncount") >= 3
    # the session opened at start-up counts as a sync connect, as Kafka's first SyncConnected
    for b in cluster.live_brokers():
        assert value(cluster, b,
                     "kafka_server_sessionexpirelistener_zookeepersyncconnects_total") >= 1
    # the console's history: sampled every second by the broker
    history = cluster.brokers[controller].metrics_history

    def active_in_history() -> bool:
        async def read() -> dict[str, list[tuple[float, float]]]:
            return history.series(["active_controller_count"])
        points = cluster.run(read())["active_controller_count"]
        return bool(points) and points[-1][1] == 1
    cluster.wait_for(active_in_history, timeout=5, what="active controller in the history")


def test_under_replicated_partitions_follow_a_killed_broker(cluster: Cluster,
                                                            admin: Admin) -> None:
    topic = new_topic(admin)
    produce(cluster, topic, 20)
    urp = "kafka_server_replicamanager_underreplicatedpartitions"
    cluster.wait_for(lambda: total(cluster, urp) == 0, what="no under-replicated partition")
    expands_before = total(cluster, "kafka_server_replicamanager_isrexpands_total")
    victim = next(b for b in cluster.live_brokers() if b != cluster.controller_id())
    cluster.kill_broker(victim)
    try:
        cluster.wait_for(lambda: total(cluster, urp) >= 1, what="under-replicated partitions")
    finally:
        cluster.restart_broker(victim)
    cluster.wait_for(lambda: total(cluster, urp) == 0, timeout=60,
                     what="under-replicated partitions back to 0")
    # the leaders took the restarted broker back into their ISRs
    assert total(cluster, "kafka_server_replicamanager_isrexpands_total") > expands_before


def test_isr_shrinks_when_a_follower_stops_fetching(cluster: Cluster, admin: Admin) -> None:
    b0, b1 = sorted(cluster.live_brokers())[:2]
    topic = new_topic(admin, assignment={0: [b0, b1]})
    produce(cluster, topic, 5)
    shrinks = "kafka_server_replicamanager_isrshrinks_total"
    before = value(cluster, b0, shrinks)

    async def stop_fetching() -> None:
        fm = cluster.brokers[b1].replica_manager.fetcher_manager
        fm.remove_fetcher_for_partitions([(topic, 0)])
    cluster.run(stop_fetching())
    produce(cluster, topic, 5)  # a follower at the leader's end offset is never out of sync
    cluster.wait_for(lambda: value(cluster, b0, shrinks) > before, timeout=30,
                     what="the leader shrinking its ISR")
    assert value(cluster, b0, "kafka_server_replicamanager_underreplicatedpartitions") >= 1


def test_offline_partitions_of_a_killed_single_replica(cluster: Cluster, admin: Admin) -> None:
    victim = next(b for b in cluster.live_brokers() if b != cluster.controller_id())
    new_topic(admin, assignment={0: [victim]})
    offline = "kafka_controller_kafkacontroller_offlinepartitionscount"
    assert value(cluster, cluster.controller_id(), offline) == 0
    cluster.kill_broker(victim)
    try:
        cluster.wait_for(lambda: value(cluster, cluster.controller_id(), offline) >= 1,
                         what="an offline partition")
    finally:
        cluster.restart_broker(victim)
    cluster.wait_for(lambda: value(cluster, cluster.controller_id(), offline) == 0,
                     timeout=60, what="no offline partition")


def test_gauges_of_the_hosted_partitions(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=2)
    produce(cluster, topic, 10)
    b = cluster.live_brokers()[0]
    samples = scrape(cluster, b)
    assert samples[("kafka_server_replicamanager_partitioncount", frozenset())] >= 2
    for p in (0, 1):
        labels = frozenset({"topic": topic, "partition": str(p)}.items())
        assert samples[("kafka_log_log_numlogsegments", labels)] == 1
        assert samples[("kafka_log_log_logstartoffset", labels)] == 0
    assert sum(samples[("kafka_log_log_logendoffset",
                        frozenset({"topic": topic, "partition": str(p)}.items()))]
               for p in (0, 1)) == 10
    assert ("kafka_server_delayedoperationpurgatory_purgatorysize",
            frozenset({"delayedOperation": "Fetch"}.items())) in samples
    assert ("kafka_server_replicafetchermanager_maxlag",
            frozenset({"clientId": "Replica"}.items())) in samples
    assert samples[("odradek_eventloop_lag_seconds_count", frozenset())] > 0


def test_topic_metrics_removed_with_the_topic(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    produce(cluster, topic, 3)
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    assert total(cluster, name, topic=topic) == 3
    admin.delete_topics([topic])
    cluster.wait_for(lambda: all((name, frozenset({"topic": topic}.items())) not in
                                 scrape(cluster, b) for b in cluster.live_brokers()),
                     what="the deleted topic's metrics gone")
    assert total(cluster, name) >= 3  # the all-topics total keeps what was counted
