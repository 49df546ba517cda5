"""BrokerMetrics and its collectors on plain fakes of the broker's state: Kafka's names as the
Prometheus JMX exporter writes them, the gauges' arithmetic, the exposition parsing back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from odradek.metrics.collectors import controller_gauges, group_counts, replica_manager_gauges
from odradek.metrics.registry import BrokerMetrics
from odradek.metrics.stats import Histogram, IsrStats, SessionStats, TopicStats


@dataclass
class FakePartition:
    topic: str
    index: int
    replicas: list[int]
    isr: list[int]
    is_leader: bool = True


@dataclass
class FakeLog:
    topic: str
    partition: int
    size: int = 0
    num_segments: int = 1
    log_start_offset: int = 0
    log_end_offset: int = 0


@dataclass
class FakePurgatory:
    n: int = 0

    def watched(self) -> int:
        return self.n

    def delayed(self) -> int:
        return self.n


@dataclass
class Lai:
    leader: int


@dataclass
class FakeContext:
    all_topics: set[str] = field(default_factory=set)
    partition_assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    partition_leadership: dict[Any, Lai] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    live: set[int] = field(default_factory=set)

    def partitions_with_offline_leader(self) -> set[Any]:
        return {tp for tp, lai in self.partition_leadership.items()
                if lai.leader not in self.live and tp[0] not in self.topics_to_be_deleted}


@dataclass
class FakeGroup:
    state: str


def samples(m: BrokerMetrics) -> dict[tuple[str, frozenset[Any]], float]:
    text = m.render().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def key(name: str, **labels: str) -> tuple[str, frozenset[Any]]:
    return name, frozenset(labels.items())


def test_topic_metrics_total_without_label_and_per_topic() -> None:
    m = BrokerMetrics(1)
    m.topics.record_append("a", 3, 300)
    m.topics.record_append("b", 2, 50)
    m.topics.record_failed_produce("a")
    m.topics.record_fetch("a", 120, follower=False, failed=False)
    m.topics.record_fetch("a", 999, follower=True, failed=False)
    m.topics.record_fetch("b", 0, follower=False, failed=True)
    s = samples(m)
    assert s[key("kafka_server_brokertopicmetrics_messagesin_total")] == 5
    assert s[key("kafka_server_brokertopicmetrics_messagesin_total", topic="a")] == 3
    assert s[key("kafka_server_brokertopicmetrics_bytesin_total", topic="b")] == 50
    assert s[key("kafka_server_brokertopicmetrics_bytesout_total")] == 120
    assert s[key("kafka_server_brokertopicmetrics_replicationbytesout_total")] == 999
    assert s[key("kafka_server_brokertopicmetrics_failedproducerequests_total", topic="a")] == 1
    assert s[key("kafka_server_brokertopicmetrics_failedfetchrequests_total")] == 1
    assert s[key("kafka_server_brokertopicmetrics_totalproducerequests_total")] == 3


def test_recording_off_records_nothing() -> None:
    m = BrokerMetrics(1, recording=False)
    m.topics.record_append("a", 3, 300)
    m.topics.record_fetch("a", 1, follower=False, failed=False)
    s = samples(m)
    assert s[key("kafka_server_brokertopicmetrics_messagesin_total")] == 0
    assert ("kafka_server_brokertopicmetrics_messagesin_total",
            frozenset({"topic": "a"}.items())) not in s
    assert not m.requests.enabled


def test_request_metrics_histograms() -> None:
    m = BrokerMetrics(1)
    m.requests.timer("Produce").record(0.002, 0.010)
    m.requests.timer("Produce").record(0.001, 0.001)
    s = samples(m)
    assert s[key("kafka_network_requestmetrics_requests_total", request="Produce")] == 2
    assert s[key("kafka_network_requestmetrics_totaltimems_count", request="Produce")] == 2
    assert abs(s[key("kafka_network_requestmetrics_totaltimems_sum", request="Produce")]
               - 11.0) < 1e-9
    assert abs(s[key("kafka_network_requestmetrics_remotetimems_sum", request="Produce")]
               - 8.0) < 1e-9
    assert s[key("kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                 le="1.0")] == 1
    assert s[key("kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                 le="+Inf")] == 2
    assert s[key("odradek_handler_seconds_count", request="Produce")] == 2
    assert abs(s[key("odradek_handler_seconds_sum", request="Produce")] - 0.003) < 1e-12
    assert s[key("odradek_handler_seconds_bucket", request="Produce", le="0.001")] == 1
    assert s[key("odradek_handler_seconds_bucket", request="Produce", le="0.0025")] == 2


def test_replica_manager_gauges() -> None:
    parts = [FakePartition("t", 0, [1, 2, 3], [1, 2, 3]),
             FakePartition("t", 1, [1, 2, 3], [1, 2]),       # under-replicated, at min ISR 2
             FakePartition("t", 2, [1, 2, 3], [1]),          # under min ISR
             FakePartition("t", 3, [2, 1, 3], [2, 3], is_leader=False)]
    g = replica_manager_gauges(parts, lambda _t: 2)
    assert g == {"partitioncount": 4, "leadercount": 3, "underreplicatedpartitions": 2,
                 "underminisrpartitioncount": 1, "atminisrpartitioncount": 1}


def test_replica_manager_collector_and_isr_meters() -> None:
    m = BrokerMetrics(1)
    parts = [FakePartition("t", 0, [1, 2], [1])]
    m.register_replica_manager(lambda: parts, lambda _t: 1,
                               {"Produce": FakePurgatory(2), "Fetch": FakePurgatory(5)},
                               lambda: 42)
    m.isr.record_isr_change([1, 2], [1])
    m.isr.record_isr_change([1], [1, 2])
    m.isr.record_isr_change([1], [1, 2])
    s = samples(m)
    assert s[key("kafka_server_replicamanager_underreplicatedpartitions")] == 1
    assert s[key("kafka_server_replicamanager_isrshrinks_total")] == 1
    assert s[key("kafka_server_replicamanager_isrexpands_total")] == 2
    assert s[key("kafka_server_delayedoperationpurgatory_purgatorysize",
                 delayedOperation="Fetch")] == 5
    assert s[key("kafka_server_replicafetchermanager_maxlag", clientId="Replica")] == 42
    parts.clear()  # gauges are computed at scrape time
    assert samples(m)[key("kafka_server_replicamanager_partitioncount")] == 0


def test_registering_again_replaces_the_collector() -> None:
    m = BrokerMetrics(1)
    m.register_groups(lambda: [FakeGroup("Stable")])
    m.register_groups(lambda: [FakeGroup("Empty"), FakeGroup("Empty")])
    s = samples(m)
    assert s[key("kafka_coordinator_group_groupmetadatamanager_numgroups")] == 2
    assert s[key("kafka_coordinator_group_groupmetadatamanager_numgroupsempty")] == 2
    assert s[key("kafka_coordinator_group_groupmetadatamanager_numgroupsstable")] == 0


def test_controller_gauges_only_on_the_active_controller() -> None:
    ctx = FakeContext(all_topics={"t", "u"},
                      partition_assignments={"t": {0: [1, 2], 1: [2, 1]}, "u": {0: [3]}},
                      partition_leadership={("t", 0): Lai(2), ("t", 1): Lai(2),
                                            ("u", 0): Lai(3)},
                      live={1, 2})
    assert controller_gauges(True, ctx) == {
        "activecontrollercount": 1, "offlinepartitionscount": 1,
        "preferredreplicaimbalancecount": 1, "globaltopiccount": 2,
        "globalpartitioncount": 3}
    assert set(controller_gauges(False, ctx).values()) == {0}
    m = BrokerMetrics(1)
    m.register_controller(lambda: True, lambda: ctx)
    m.controller.record_election(3.0, unclean=True)
    m.controller.record_election(1.0, unclean=False)
    s = samples(m)
    assert s[key("kafka_controller_kafkacontroller_activecontrollercount")] == 1
    assert s[key("kafka_controller_kafkacontroller_offlinepartitionscount")] == 1
    assert s[key("kafka_controller_controllerstats_leaderelectionrateandtimems_count")] == 2
    assert s[key("kafka_controller_controllerstats_uncleanleaderelections_total")] == 1


def test_log_gauges_per_partition_and_flush_stats() -> None:
    m = BrokerMetrics(1)
    m.register_logs(lambda: [FakeLog("t", 0, 1000, 3, 10, 99)])
    m.log_flush.record_flush(4.0)
    s = samples(m)
    assert s[key("kafka_log_log_size", topic="t", partition="0")] == 1000
    assert s[key("kafka_log_log_numlogsegments", topic="t", partition="0")] == 3
    assert s[key("kafka_log_log_logstartoffset", topic="t", partition="0")] == 10
    assert s[key("kafka_log_log_logendoffset", topic="t", partition="0")] == 99
    assert s[key("kafka_log_logflushstats_logflushrateandtimems_count")] == 1


def test_session_events() -> None:
    m = BrokerMetrics(1)
    for state in ("connected", "suspended", "connected", "expired", "connected"):
        m.on_session_state(state)
    s = samples(m)
    assert s[key("kafka_server_sessionexpirelistener_zookeeperexpires_total")] == 1
    assert s[key("kafka_server_sessionexpirelistener_zookeeperdisconnects_total")] == 1
    assert s[key("kafka_server_sessionexpirelistener_zookeepersyncconnects_total")] == 3


def test_brokers_do_not_share_metrics() -> None:
    a, b = BrokerMetrics(1), BrokerMetrics(2)
    a.topics.record_append("t", 1, 1)
    assert samples(b)[key("kafka_server_brokertopicmetrics_messagesin_total")] == 0


def test_event_loop_probe_records_lag() -> None:
    m = BrokerMetrics(1)

    async def body() -> None:
        task = asyncio.create_task(m.run_event_loop_probe(0.01))
        await asyncio.sleep(0.05)
        import time
        time.sleep(0.06)  # block the loop: the probe must see it late
        await asyncio.sleep(0.03)
        task.cancel()
    asyncio.run(body())
    assert m.event_loop_lag.count >= 2
    assert m.event_loop_lag.sum >= 0.04


def test_histogram_quantile_and_cumulative() -> None:
    h = Histogram([1, 10, 100])
    for v in (0.5, 5, 5, 50, 500):
        h.observe(v)
    assert h.cumulative() == [("1.0", 1), ("10.0", 3), ("100.0", 4), ("+Inf", 5)]
    assert h.quantile(0.5) == 10
    assert h.quantile(0.99) == 100  # the +Inf bucket reports the last finite bound
    assert Histogram([1]).quantile(0.9) == 0


def test_milliseconds_histogram_in_seconds() -> None:
    h = Histogram([0.5, 1, 10, 100, 1000, 30000])
    for v in (0.2, 0.7, 5, 50, 20000, 99999):
        h.observe(v)
    s = h.in_seconds([0.001, 0.1])
    assert s.bounds == (0.001, 0.1)
    assert s.counts == [2, 2, 2]  # <= 1 ms, <= 100 ms, the rest
    assert abs(s.sum - h.sum / 1000) < 1e-12


def test_group_counts_and_small_recorders() -> None:
    assert group_counts([FakeGroup("Stable"), FakeGroup("Dead")])[""] == 2
    isr = IsrStats()
    isr.record_isr_change([1, 2], [1, 3])  # one out, one in
    assert (isr.shrinks, isr.expands) == (1, 1)
    s = SessionStats()
    s.record_state("unknown")
    assert (s.expires, s.disconnects, s.sync_connects) == (0, 0, 0)
    t = TopicStats()
    t.remove_topic("x")
    t.record_append("x", 1, 1)
    t.remove_topic("x")
    assert t.topics == {}
