"""What the broker records as it works (Kafka's meters and timers), as plain numbers.

The hot paths (Produce, Fetch, every request) add to ints in dicts and to the bucket counts of
a `Histogram`: no locks, no label lookups, no allocation per request once a topic or request
name was seen. Everything runs on the broker's event loop; the collectors of `registry` read
these numbers at scrape time. Rates (Kafka's ...PerSec meters) are the counters' derivatives,
as Prometheus computes them (`rate(...)`), and `history.MetricsHistory` for the console.

Each broker owns its own instances (several brokers share one process in `odradek.Cluster`).
The `Disabled...` variants record nothing (config `metrics.recording.enabled=false`, for the
overhead comparison of bench/bench_metrics.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: Bucket upper bounds of Kafka's ...TimeMs timers, in milliseconds.
MS_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000,
                                 2500, 5000, 10000, 30000)
#: Bucket upper bounds of odradek's seconds histograms (event-loop lag, handler time).
SECONDS_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                      0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """Bucket counts and a sum (a Prometheus histogram without the client library's lock)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs as Prometheus wants them, ending with +Inf."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out

    def in_seconds(self, bounds: Sequence[float] = SECONDS_BUCKETS) -> Histogram:
        """This histogram of milliseconds as one of seconds with `bounds`, each of which
        (times 1000) must be one of this one's bounds."""
        out = Histogram(bounds)
        ms = [b * 1000 for b in bounds]
        out.counts = [0] * (len(bounds) + 1)
        j = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            while j < len(ms) and bound > ms[j] + 1e-9:
                j += 1
            out.counts[j] += n
        out.sum = self.sum / 1000
        return out

    def quantile(self, q: float) -> float:
        """An upper bound of the q-quantile (the bucket bound it falls in); 0 when empty."""
        total = self.count
        if total == 0:
            return 0.0
        rank, seen = q * total, 0
        for bound, n in zip((*self.bounds, self.bounds[-1]), self.counts, strict=True):
            seen += n
            if seen >= rank:
                return float(bound)
        return float(self.bounds[-1])


@dataclass
class TopicCounts:
    """One topic's BrokerTopicMetrics (also the all-topics total)."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    replication_bytes_out: int = 0
    failed_produce_requests: int = 0
    failed_fetch_requests: int = 0
    total_produce_requests: int = 0
    total_fetch_requests: int = 0


class TopicStats:
    """Kafka's BrokerTopicStats: per-topic counts and their all-topics total."""

    enabled = True

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounts] = {}
        self.total = TopicCounts()

    def _of(self, topic: str) -> TopicCounts:
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = TopicCounts()
        return c

    def record_append(self, topic: str, messages: int, size: int) -> None:
        """A leader appended `messages` records (from the batch headers) of `size` bytes."""
        c = self._of(topic)
        c.messages_in += messages
        c.bytes_in += size
        c.total_produce_requests += 1
        t = self.total
        t.messages_in += messages
        t.bytes_in += size
        t.total_produce_requests += 1

    def record_failed_produce(self, topic: str) -> None:
        c = self._of(topic)
        c.failed_produce_requests += 1
        c.total_produce_requests += 1
        self.total.failed_produce_requests += 1
        self.total.total_produce_requests += 1

    def record_fetch(self, topic: str, size: int, follower: bool, failed: bool) -> None:
        """A Fetch response carried `size` bytes of `topic` (Kafka's updateBytesOut: a
        follower's bytes count as replication bytes out, on the all-topics total only; a
        consumer's as bytes out of the topic)."""
        t = self.total
        t.total_fetch_requests += 1
        if follower:
            t.replication_bytes_out += size
            return
        c = self._of(topic)
        c.total_fetch_requests += 1
        if failed:
            c.failed_fetch_requests += 1
            t.failed_fetch_requests += 1
        else:
            c.bytes_out += size
            t.bytes_out += size

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)


class DisabledTopicStats(TopicStats):
    enabled = False

    def record_append(self, topic: str, messages: int, size: int) -> None:
        pass

    def record_failed_produce(self, topic: str) -> None:
        pass

    def record_fetch(self, topic: str, size: int, follower: bool, failed: bool) -> None:
        pass


@dataclass
class RequestTimer:
    """One request name's RequestMetrics (times in ms as Kafka's); the handler seconds are
    LocalTimeMs in seconds (`in_seconds`), not recorded twice."""

    requests: int = 0
    total_time_ms: Histogram = field(default_factory=lambda: Histogram(MS_BUCKETS))
    local_time_ms: Histogram = field(default_factory=lambda: Histogram(MS_BUCKETS))
    remote_time_ms: Histogram = field(default_factory=lambda: Histogram(MS_BUCKETS))

    def record(self, local_s: float, total_s: float) -> None:
        """`local_s` on the loop in the handler; `total_s` until the response was ready (the
        rest is time waiting in a purgatory or on another broker: Kafka's RemoteTime)."""
        self.requests += 1
        self.local_time_ms.observe(local_s * 1000)
        self.remote_time_ms.observe((total_s - local_s) * 1000)
        self.total_time_ms.observe(total_s * 1000)


class RequestStats:
    """Kafka's RequestMetrics per request name."""

    enabled = True

    def __init__(self) -> None:
        self.by_name: dict[str, RequestTimer] = {}

    def timer(self, name: str) -> RequestTimer:
        t = self.by_name.get(name)
        if t is None:
            t = self.by_name[name] = RequestTimer()
        return t


class DisabledRequestStats(RequestStats):
    enabled = False


@dataclass
class IsrStats:
    """ReplicaManager's IsrShrinksPerSec / IsrExpandsPerSec (committed ISR changes)."""

    shrinks: int = 0
    expands: int = 0

    def record_isr_change(self, old_isr: Iterable[int], new_isr: Iterable[int]) -> None:
        old, new = set(old_isr), set(new_isr)
        if new - old:
            self.expands += 1
        if old - new:
            self.shrinks += 1


@dataclass
class ControllerStats:
    """Kafka's ControllerStats: leader elections (time in ms) and unclean ones."""

    leader_election_ms: Histogram = field(default_factory=lambda: Histogram(MS_BUCKETS))
    unclean_leader_elections: int = 0

    def record_election(self, elapsed_ms: float, unclean: bool) -> None:
        self.leader_election_ms.observe(elapsed_ms)
        if unclean:
            self.unclean_leader_elections += 1


@dataclass
class LogFlushStats:
    """Kafka's LogFlushStats: LogFlushRateAndTimeMs."""

    flush_ms: Histogram = field(default_factory=lambda: Histogram(MS_BUCKETS))

    def record_flush(self, elapsed_ms: float) -> None:
        self.flush_ms.observe(elapsed_ms)


@dataclass
class SessionStats:
    """Kafka's SessionExpireListener meters (ZooKeeper session events)."""

    expires: int = 0
    disconnects: int = 0
    sync_connects: int = 0

    def record_state(self, state: str) -> None:
        """`state`: "connected", "suspended" or "expired" (coordination.store.SessionState
        values; kazoo's CONNECTED, SUSPENDED, LOST)."""
        if state == "expired":
            self.expires += 1
        elif state == "suspended":
            self.disconnects += 1
        elif state == "connected":
            self.sync_connects += 1
