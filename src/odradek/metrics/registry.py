"""One broker's metrics (Kafka's KafkaMetricsGroup beans) on its own prometheus-client registry.

`BrokerMetrics(broker_id)` holds the recorders the broker hands to the components that record
(`topics`, `requests`, `isr`, `controller`, `log_flush`, `session`, `event_loop_lag`) and the
scrape-time collectors of the gauges, registered by the broker with callables reading its state
(`register_replica_manager`, `register_logs`, `register_controller`, `register_groups`).
`render()` is the Prometheus text exposition of all of it; `snapshot()` reads the numbers now
(on the event loop) and returns the formatting as a callable that may run in a worker thread
(the HTTP listener's /metrics). docs/metrics.md lists the names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from . import exposition
from .collectors import (
    ControllerCollector,
    ControllerContextView,
    FetchSessionCacheCollector,
    FetchSessionView,
    GroupCollector,
    GroupView,
    HistogramCollector,
    LogCollector,
    LogView,
    PartitionView,
    PurgatoryView,
    ReplicaManagerCollector,
    RequestStatsCollector,
    SessionCollector,
    TopicStatsCollector,
)
from .stats import (
    SECONDS_BUCKETS,
    ControllerStats,
    DisabledRequestStats,
    DisabledTopicStats,
    Histogram,
    IsrStats,
    LogFlushStats,
    RequestStats,
    SessionStats,
    TopicStats,
)

#: How often the event-loop lag probe wakes up.
EVENT_LOOP_PROBE_INTERVAL_S = 0.1


class BrokerMetrics:
    def __init__(self, broker_id: int, *, recording: bool = True) -> None:
        """`recording=False` (config `metrics.recording.enabled=false`): the Produce, Fetch
        and request recorders record nothing; the scrape-time gauges still work."""
        self.broker_id = broker_id
        self.registry = CollectorRegistry(auto_describe=False)
        self.topics: TopicStats = TopicStats() if recording else DisabledTopicStats()
        self.requests: RequestStats = RequestStats() if recording else DisabledRequestStats()
        self.isr = IsrStats()
        self.controller = ControllerStats()
        self.log_flush = LogFlushStats()
        self.session = SessionStats()
        self.event_loop_lag = Histogram(SECONDS_BUCKETS)
        #: every collector, in the registry's order (a re-registered gauge goes last)
        self._collectors: dict[str, Collector] = {}
        self._gauges: dict[str, object] = {}
        for key, collector in (
                ("topic_stats", TopicStatsCollector(self.topics)),
                ("request_stats", RequestStatsCollector(self.requests)),
                ("session", SessionCollector(self.session)),
                ("event_loop_lag", HistogramCollector(
                    "odradek_eventloop_lag_seconds",
                    "How late the event loop ran a callback scheduled "
                    f"{EVENT_LOOP_PROBE_INTERVAL_S} s ahead", self.event_loop_lag))):
            self.registry.register(collector)
            self._collectors[key] = collector
        # read by MetricsHistory: the last computed gauges, refreshed on each sample
        self.replica_manager_collector: ReplicaManagerCollector | None = None
        self.controller_collector: ControllerCollector | None = None

    # -- scrape-time gauges, registered by the broker ---------------------------------------
    def _register(self, key: str, collector: object) -> None:
        old = self._gauges.pop(key, None)
        if old is not None:
            self.registry.unregister(old)  # type: ignore[arg-type]
            self._collectors.pop(key, None)
        self.registry.register(collector)  # type: ignore[arg-type]
        self._gauges[key] = collector
        self._collectors[key] = collector  # type: ignore[assignment]

    def register_replica_manager(self, partitions: Callable[[], Iterable[PartitionView]],
                                 min_isr: Callable[[str], int],
                                 purgatories: Mapping[str, PurgatoryView],
                                 max_lag: Callable[[], int]) -> None:
        c = ReplicaManagerCollector(partitions, min_isr, self.isr, purgatories, max_lag)
        self.replica_manager_collector = c
        self._register("replica_manager", c)

    def register_logs(self, logs: Callable[[], Iterable[LogView]]) -> None:
        self._register("logs", LogCollector(logs, self.log_flush))

    def register_controller(self, active: Callable[[], bool],
                            context: Callable[[], ControllerContextView | None]) -> None:
        c = ControllerCollector(active, context, self.controller)
        self.controller_collector = c
        self._register("controller", c)

    def register_fetch_sessions(self, cache: FetchSessionView) -> None:
        self._register("fetch_sessions", FetchSessionCacheCollector(cache))

    def register_groups(self, groups: Callable[[], Iterable[GroupView]]) -> None:
        self._register("groups", GroupCollector(groups))

    # -- recording helpers -------------------------------------------------------------------
    def on_session_state(self, state: object) -> None:
        """A coordination session listener (SessionState or its value)."""
        self.session.record_state(str(getattr(state, "value", state)))

    async def run_event_loop_probe(self, interval_s: float = EVENT_LOOP_PROBE_INTERVAL_S
                                   ) -> None:
        """Forever: sleep `interval_s` and record how much later than asked the loop woke us
        (the loop's scheduling delay: long callbacks, blocking calls)."""
        clock = time.perf_counter
        while True:
            start = clock()
            await asyncio.sleep(interval_s)
            self.event_loop_lag.observe(max(0.0, clock() - start - interval_s))

    # -- exposition --------------------------------------------------------------------------
    def render(self) -> bytes:
        """The Prometheus text exposition (version 0.0.4) of every metric of this broker."""
        return self.snapshot()()

    def snapshot(self) -> Callable[[], bytes]:
        """Read every metric now (call on the broker's event loop); the returned callable
        formats the exposition from what was read and touches no live state, so it may run in
        a worker thread. The per-partition Log gauges, most of a big broker's samples, are
        read as plain numbers here and built into metric families by the callable."""
        parts: list[Callable[[], list[Metric]] | list[Metric]] = []
        for collector in list(self._collectors.values()):
            deferred = getattr(collector, "snapshot", None)
            parts.append(deferred() if callable(deferred) else list(collector.collect()))

        def format_all() -> bytes:
            metrics: list[Metric] = []
            for part in parts:
                metrics.extend(part() if callable(part) else part)
            return exposition.format_metrics(metrics)
        return format_all
