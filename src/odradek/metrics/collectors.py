"""Scrape-time collectors: Kafka's gauges computed from the broker's state when scraped, and
the recorded numbers of `stats` as metric families. Names follow the Prometheus JMX exporter's
usual Kafka rules (`kafka.server<type=ReplicaManager, name=PartitionCount><>Value` ->
`kafka_server_replicamanager_partitioncount`; a meter's Count -> `..._total`).

The state arrives through the small Protocols below (plain attributes the server's objects
already have) and callables the broker registers: this package sits below storage, server and
controller and imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .stats import (
    ControllerStats,
    Histogram,
    IsrStats,
    LogFlushStats,
    RequestStats,
    SessionStats,
    TopicStats,
)


class PartitionView(Protocol):
    """What the ReplicaManager gauges read of a hosted partition
    (server.replication.partition.Partition)."""

    topic: str
    index: int
    replicas: list[int]
    isr: list[int]

    @property
    def is_leader(self) -> bool: ...


class LogView(Protocol):
    """What the Log gauges read of a log (storage.log.Log)."""

    topic: str
    partition: int

    @property
    def size(self) -> int: ...

    @property
    def num_segments(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...


class PurgatoryView(Protocol):
    def watched(self) -> int: ...

    def delayed(self) -> int: ...


class LeaderAndIsrView(Protocol):
    leader: int


class ControllerContextView(Protocol):
    """What the KafkaController gauges read of the controller's context."""

    all_topics: set[str]
    partition_assignments: Mapping[str, Mapping[int, Sequence[int]]]
    partition_leadership: Mapping[Any, Any]
    topics_to_be_deleted: set[str]

    def partitions_with_offline_leader(self) -> Collection[Any]: ...


class GroupView(Protocol):
    state: Any


# -- pure computations -------------------------------------------------------------------------

def replica_manager_gauges(partitions: Iterable[PartitionView],
                           min_isr: Callable[[str], int]) -> dict[str, int]:
    """Kafka's ReplicaManager gauges over the partitions hosted here: under-replicated, under
    and at min ISR are counted on the leaders (Partition.isUnderReplicated etc.)."""
    count = leaders = under = under_min = at_min = 0
    for p in partitions:
        count += 1
        if not p.is_leader:
            continue
        leaders += 1
        isr = len(p.isr)
        if isr < len(p.replicas):
            under += 1
        m = min_isr(p.topic)
        if isr < m:
            under_min += 1
        elif isr == m:
            at_min += 1
    return {"partitioncount": count, "leadercount": leaders,
            "underreplicatedpartitions": under, "underminisrpartitioncount": under_min,
            "atminisrpartitioncount": at_min}


def controller_gauges(active: bool, ctx: ControllerContextView | None) -> dict[str, int]:
    """Kafka's KafkaController gauges: all but ActiveControllerCount are 0 on a broker that is
    not the active controller (Kafka's `if (!isActive) 0`)."""
    if not active or ctx is None:
        return {"activecontrollercount": 0, "offlinepartitionscount": 0,
                "preferredreplicaimbalancecount": 0, "globaltopiccount": 0,
                "globalpartitioncount": 0}
    imbalance = 0
    deleting = ctx.topics_to_be_deleted
    for tp, lai in ctx.partition_leadership.items():
        topic, index = tp
        if topic in deleting:
            continue
        replicas = ctx.partition_assignments.get(topic, {}).get(index)
        if replicas and lai.leader != replicas[0]:
            imbalance += 1
    return {"activecontrollercount": 1,
            "offlinepartitionscount": len(ctx.partitions_with_offline_leader()),
            "preferredreplicaimbalancecount": imbalance,
            "globaltopiccount": len(ctx.all_topics),
            "globalpartitioncount": sum(len(a) for a in ctx.partition_assignments.values())}


GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


def group_counts(groups: Iterable[GroupView]) -> dict[str, int]:
    counts = dict.fromkeys(GROUP_STATES, 0)
    total = 0
    for g in groups:
        total += 1
        state = str(g.state)
        counts[state] = counts.get(state, 0) + 1
    return {"": total, **counts}


def histogram_family(name: str, doc: str, labels: Sequence[str] = ()) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=list(labels))


def add_histogram(family: HistogramMetricFamily, values: Sequence[str], h: Histogram) -> None:
    family.add_metric(list(values), h.cumulative(), h.sum)


# -- collectors -------------------------------------------------------------------------------

class TopicStatsCollector(Collector):
    """BrokerTopicMetrics: the all-topics bean without a topic label, the per-topic ones with."""

    FIELDS = (("messagesin", "messages_in", "Records appended (MessagesInPerSec)"),
              ("bytesin", "bytes_in", "Bytes appended by clients (BytesInPerSec)"),
              ("bytesout", "bytes_out", "Bytes sent to consumers (BytesOutPerSec)"),
              ("failedproducerequests", "failed_produce_requests",
               "Partition appends that failed (FailedProduceRequestsPerSec)"),
              ("failedfetchrequests", "failed_fetch_requests",
               "Partition reads that failed (FailedFetchRequestsPerSec)"),
              ("totalproducerequests", "total_produce_requests",
               "Partition appends (TotalProduceRequestsPerSec)"),
              ("totalfetchrequests", "total_fetch_requests",
               "Partition reads (TotalFetchRequestsPerSec)"))

    def __init__(self, stats: TopicStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        for short, attr, doc in self.FIELDS:
            name = f"kafka_server_brokertopicmetrics_{short}"
            family = CounterMetricFamily(name, doc)
            family.add_metric([], getattr(stats.total, attr))
            for topic, counts in stats.topics.items():
                family.add_sample(f"{name}_total", {"topic": topic}, getattr(counts, attr))
            yield family
        rep = CounterMetricFamily("kafka_server_brokertopicmetrics_replicationbytesout",
                                  "Bytes sent to followers (ReplicationBytesOutPerSec)")
        rep.add_metric([], stats.total.replication_bytes_out)
        yield rep


class RequestStatsCollector(Collector):
    def __init__(self, stats: RequestStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests handled (RequestsPerSec)", labels=["request"])
        times = {part: histogram_family(f"kafka_network_requestmetrics_{part.lower()}",
                                        f"{part} of each request (RequestMetrics)",
                                        ["request"])
                 for part in ("TotalTimeMs", "LocalTimeMs", "RemoteTimeMs")}
        handler = histogram_family("odradek_handler_seconds",
                                   "Time in the request handler on the event loop",
                                   ["request"])
        for name, t in self.stats.by_name.items():
            requests.add_metric([name], t.requests)
            add_histogram(times["TotalTimeMs"], [name], t.total_time_ms)
            add_histogram(times["LocalTimeMs"], [name], t.local_time_ms)
            add_histogram(times["RemoteTimeMs"], [name], t.remote_time_ms)
            add_histogram(handler, [name], t.local_time_ms.in_seconds())
        yield requests
        yield from times.values()
        yield handler


class ReplicaManagerCollector(Collector):
    """ReplicaManager gauges and ISR meters, purgatory sizes, the fetchers' MaxLag."""

    def __init__(self, partitions: Callable[[], Iterable[PartitionView]],
                 min_isr: Callable[[str], int], isr_stats: IsrStats,
                 purgatories: Mapping[str, PurgatoryView],
                 max_lag: Callable[[], int]) -> None:
        self.partitions = partitions
        self.min_isr = min_isr
        self.isr_stats = isr_stats
        self.purgatories = purgatories
        self.max_lag = max_lag

    def collect(self) -> Iterator[Metric]:
        for name, value in replica_manager_gauges(self.partitions(), self.min_isr).items():
            g = GaugeMetricFamily(f"kafka_server_replicamanager_{name}",
                                  f"ReplicaManager {name}")
            g.add_metric([], value)
            yield g
        for name, value in (("isrshrinks", self.isr_stats.shrinks),
                            ("isrexpands", self.isr_stats.expands)):
            c = CounterMetricFamily(f"kafka_server_replicamanager_{name}",
                                    f"ISR {name[3:]} committed by this leader")
            c.add_metric([], value)
            yield c
        size = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                 "Watched delayed operations (PurgatorySize)",
                                 labels=["delayedOperation"])
        delayed = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "Delayed operations not completed (NumDelayedOperations)",
            labels=["delayedOperation"])
        for op, purgatory in self.purgatories.items():
            size.add_metric([op], purgatory.watched())
            delayed.add_metric([op], purgatory.delayed())
        yield size
        yield delayed
        lag = GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag",
                                "Largest lag in messages of a partition this broker follows",
                                labels=["clientId"])
        lag.add_metric(["Replica"], self.max_lag())
        yield lag


class LogCollector(Collector):
    """Log gauges per partition and LogFlushStats."""

    GAUGES = (("size", "size", "Bytes of the log"),
              ("numlogsegments", "num_segments", "Segments of the log"),
              ("logstartoffset", "log_start_offset", "First offset of the log"),
              ("logendoffset", "log_end_offset", "Next offset of the log"))

    def __init__(self, logs: Callable[[], Iterable[LogView]], flush_stats: LogFlushStats) -> None:
        self.logs = logs
        self.flush_stats = flush_stats

    def collect(self) -> Iterator[Metric]:
        return iter(self.snapshot()())

    def snapshot(self) -> Callable[[], list[Metric]]:
        """Read every log's numbers now (on the event loop: plain tuples, cheap); the returned
        callable builds the metric families from them (anywhere: touches no live state)."""
        rows = [(lg.topic, lg.partition, lg.size, lg.num_segments, lg.log_start_offset,
                 lg.log_end_offset) for lg in self.logs()]
        flush = histogram_family("kafka_log_logflushstats_logflushrateandtimems",
                                 "Log flushes and their time in ms (LogFlushRateAndTimeMs)")
        add_histogram(flush, [], self.flush_stats.flush_ms)

        def build() -> list[Metric]:
            families = [GaugeMetricFamily(f"kafka_log_log_{name}", doc,
                                          labels=["topic", "partition"])
                        for name, _, doc in self.GAUGES]
            size, segments, start, end = families
            for topic, partition, n_bytes, n_segments, first, nxt in rows:
                labels = [topic, str(partition)]
                size.add_metric(labels, n_bytes)
                segments.add_metric(labels, n_segments)
                start.add_metric(labels, first)
                end.add_metric(labels, nxt)
            return [*families, flush]
        return build


class ControllerCollector(Collector):
    def __init__(self, active: Callable[[], bool],
                 context: Callable[[], ControllerContextView | None],
                 stats: ControllerStats) -> None:
        self.active = active
        self.context = context
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        for name, value in controller_gauges(self.active(), self.context()).items():
            g = GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}",
                                  f"KafkaController {name}")
            g.add_metric([], value)
            yield g
        elections = histogram_family(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            "Leader elections and their time in ms (LeaderElectionRateAndTimeMs)")
        add_histogram(elections, [], self.stats.leader_election_ms)
        yield elections
        unclean = CounterMetricFamily(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "Unclean leader elections (UncleanLeaderElectionsPerSec)")
        unclean.add_metric([], self.stats.unclean_leader_elections)
        yield unclean


class GroupCollector(Collector):
    def __init__(self, groups: Callable[[], Iterable[GroupView]]) -> None:
        self.groups = groups

    def collect(self) -> Iterator[Metric]:
        for state, n in group_counts(self.groups()).items():
            g = GaugeMetricFamily(
                f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.lower()}",
                f"Groups{' in state ' + state if state else ''} (NumGroups{state})")
            g.add_metric([], n)
            yield g


class FetchSessionView(Protocol):
    """What the fetch session cache (server/fetch_session.py) shows."""

    num_partitions: int
    evictions: int

    def __len__(self) -> int: ...


class FetchSessionCacheCollector(Collector):
    """Kafka's FetchSessionCache gauges and eviction meter (KIP-227)."""

    def __init__(self, cache: FetchSessionView) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        prefix = "kafka_server_fetchsessioncache_"
        for name, doc, value in (
                ("numincrementalfetchsessions", "Fetch sessions cached",
                 len(self.cache)),
                ("numincrementalfetchpartitionscached", "Partitions in the cached sessions",
                 self.cache.num_partitions)):
            g = GaugeMetricFamily(prefix + name, f"{doc} (FetchSessionCache)")
            g.add_metric([], value)
            yield g
        c = CounterMetricFamily(prefix + "incrementalfetchsessionevictions",
                                "Fetch sessions evicted (IncrementalFetchSessionEvictionsPerSec)")
        c.add_metric([], self.cache.evictions)
        yield c


class SessionCollector(Collector):
    def __init__(self, stats: SessionStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        for name, value in (("zookeeperexpires", self.stats.expires),
                            ("zookeeperdisconnects", self.stats.disconnects),
                            ("zookeepersyncconnects", self.stats.sync_connects)):
            c = CounterMetricFamily(f"kafka_server_sessionexpirelistener_{name}",
                                    f"Coordination session events ({name})")
            c.add_metric([], value)
            yield c


class HistogramCollector(Collector):
    """One unlabelled odradek histogram (e.g. the event-loop lag)."""

    def __init__(self, name: str, doc: str, histogram: Histogram) -> None:
        self.name = name
        self.doc = doc
        self.histogram = histogram

    def collect(self) -> Iterator[Metric]:
        family = histogram_family(self.name, self.doc)
        add_histogram(family, [], self.histogram)
        yield family
