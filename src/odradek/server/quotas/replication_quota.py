"""KIP-73 replication quotas (Kafka's ReplicationQuotaManager), pure arithmetic.

A broker keeps two managers: LEADER (bytes it sends to followers for throttled partitions,
bounded by `leader.replication.throttled.rate`) and FOLLOWER (bytes it fetches for throttled
partitions, bounded by `follower.replication.throttled.rate`). Which partitions are throttled
comes from the topic configs `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas`: "*" (every replica) or "partition:broker,..." where
only the entries naming this broker count. The rate is measured as Kafka's sampled `Rate`:
`replication.quota.window.num` samples of `replication.quota.window.size.seconds` each.

When a quota is exceeded, the leader leaves throttled partitions of out-of-sync followers out of
its fetch response (no data, no error) and the follower leaves throttled partitions out of its
fetch request; unthrottled partitions, producers and consumers are never affected (S-6.3
tooling). No I/O here: the clock is injected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ...common import clock

LONG_MAX = 2**63 - 1

#: Kafka's defaults: replication.quota.window.num / replication.quota.window.size.seconds.
DEFAULT_NUM_SAMPLES = 11
DEFAULT_WINDOW_SECONDS = 1

LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"

ALL_REPLICAS = "*"

_LIST_FORMAT = ("must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


class ThrottledReplicaListError(ValueError):
    pass


def _items(value: str | Iterable[str]) -> list[str]:
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip() for p in parts if p.strip()]


def parse_throttled_replicas(value: str | Iterable[str]) -> str | list[tuple[int, int]]:
    """Kafka's ThrottledReplicaListValidator: "*" (ALL_REPLICAS), an empty list, or
    "partition:broker" pairs. Raises ThrottledReplicaListError otherwise."""
    items = _items(value)
    if items == [ALL_REPLICAS]:
        return ALL_REPLICAS
    out: list[tuple[int, int]] = []
    for item in items:
        p, sep, b = item.partition(":")
        if not sep or not p.strip().isdigit() or not b.strip().isdigit():
            raise ThrottledReplicaListError(_LIST_FORMAT)
        out.append((int(p), int(b)))
    return out


def throttled_partitions(value: str | Iterable[str], broker_id: int) -> str | frozenset[int]:
    """Kafka's QuotaConfigHandler.parseThrottledPartitions: ALL_REPLICAS, or the partitions
    whose listed replica is this broker."""
    parsed = parse_throttled_replicas(value)
    if parsed == ALL_REPLICAS:
        return ALL_REPLICAS
    assert not isinstance(parsed, str)
    return frozenset(p for p, b in parsed if b == broker_id)


@dataclass
class _Sample:
    start_ms: int
    value: float = 0.0


@dataclass
class Rate:
    """Kafka's SampledStat Rate: bytes recorded into `num_samples` windows of `window_ms`; the
    rate is their sum over the elapsed time since the oldest window began, counted as at least
    `num_samples - 1` full windows (so a fresh rate is not inflated by a short elapsed time)."""

    num_samples: int = DEFAULT_NUM_SAMPLES
    window_ms: int = DEFAULT_WINDOW_SECONDS * 1000
    samples: list[_Sample] = field(default_factory=list)

    def record(self, value: float, now_ms: int) -> None:
        current = self.samples[-1] if self.samples else None
        if current is None or now_ms >= current.start_ms + self.window_ms:
            current = _Sample(now_ms)
            self.samples.append(current)
            if len(self.samples) > self.num_samples:
                del self.samples[0]
        current.value += value

    def _purge(self, now_ms: int) -> None:
        expire_age = self.num_samples * self.window_ms
        self.samples = [s for s in self.samples if now_ms - s.start_ms < expire_age]

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        oldest = self.samples[0].start_ms if self.samples else now_ms
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        min_full_windows = self.num_samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Bytes per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self.samples)
        return total * 1000.0 / self.window_size_ms(now_ms)


def _wall_ms() -> int:
    return int(clock.monotonic() * 1000)


class ReplicationQuotaManager:
    """Kafka's ReplicationQuotaManager for one side (LEADER or FOLLOWER)."""

    def __init__(self, name: str, num_samples: int = DEFAULT_NUM_SAMPLES,
                 window_seconds: int = DEFAULT_WINDOW_SECONDS,
                 clock: Callable[[], int] = _wall_ms) -> None:
        self.name = name
        self.clock = clock
        self.rate = Rate(num_samples, window_seconds * 1000)
        self.quota = LONG_MAX  # bytes/s; LONG_MAX = unthrottled
        self._throttled: dict[str, str | frozenset[int]] = {}

    def update_quota(self, bytes_per_second: int) -> None:
        self.quota = bytes_per_second

    def is_quota_exceeded(self) -> bool:
        if self.quota >= LONG_MAX:
            return False
        return self.rate.measure(self.clock()) > self.quota

    def record(self, num_bytes: int) -> None:
        self.rate.record(num_bytes, self.clock())

    def mark_throttled(self, topic: str, partitions: str | frozenset[int]) -> None:
        """ALL_REPLICAS or a set of partition ids; an empty set removes the throttle."""
        if partitions == ALL_REPLICAS or partitions:
            self._throttled[topic] = partitions
        else:
            self._throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def is_throttled(self, topic: str, partition: int) -> bool:
        entry = self._throttled.get(topic)
        if entry is None:
            return False
        return entry == ALL_REPLICAS or partition in entry

    def throttled_topics(self) -> dict[str, str | frozenset[int]]:
        return dict(self._throttled)


@dataclass(frozen=True, slots=True)
class ReplicationQuotas:
    """A broker's three replication quotas (Kafka's QuotaManagers.leader, .follower and
    .alterLogDirs): bytes a leader sends to followers, bytes a follower fetches, bytes copied
    between log dirs (KIP-113), each over the same sampled window."""

    leader: ReplicationQuotaManager
    follower: ReplicationQuotaManager
    alter_log_dirs: ReplicationQuotaManager

    @classmethod
    def create(cls, num_samples: int = DEFAULT_NUM_SAMPLES,
               window_seconds: int = DEFAULT_WINDOW_SECONDS) -> ReplicationQuotas:
        """`replication.quota.window.num` samples of `replication.quota.window.size.seconds`."""
        return cls(*(ReplicationQuotaManager(name, num_samples, window_seconds)
                     for name in ("LeaderReplication", "FollowerReplication", "AlterLogDirs")))


def should_leader_throttle(quota: ReplicationQuotaManager, topic: str, partition: int,
                           replica_in_sync: bool) -> bool:
    """Kafka's ReplicaManager.shouldLeaderThrottle: in-sync followers are never throttled."""
    return (not replica_in_sync and quota.is_throttled(topic, partition)
            and quota.is_quota_exceeded())


def should_follower_throttle(quota: ReplicationQuotaManager, topic: str, partition: int,
                             replica_in_sync: bool) -> bool:
    """Kafka's ReplicaFetcherThread.shouldFollowerThrottle."""
    return (not replica_in_sync and quota.is_throttled(topic, partition)
            and quota.is_quota_exceeded())
