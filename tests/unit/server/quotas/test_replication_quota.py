"""KIP-73 replication quota arithmetic: Kafka's sampled Rate with an injected
clock, ReplicationQuotaManager, the throttled-replica lists and the throttle decisions."""

from __future__ import annotations

import pytest

from odradek.server.quotas.replication_quota import (
    ALL_REPLICAS,
    LONG_MAX,
    Rate,
    ReplicationQuotaManager,
    ThrottledReplicaListError,
    parse_throttled_replicas,
    should_follower_throttle,
    should_leader_throttle,
    throttled_partitions,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    rate = Rate(num_samples=11, window_ms=1000)
    rate.record(10_000, 0)
    # fresh: elapsed 0 is counted as 10 full windows (Kafka's Rate.windowSize)
    assert rate.measure(0) == pytest.approx(1000.0)
    assert rate.measure(500) == pytest.approx(10_000 / 10.5)


def test_rate_over_a_full_window_and_expiry() -> None:
    rate = Rate(num_samples=3, window_ms=1000)
    for t in range(0, 3000, 100):  # 100 bytes every 100 ms = 1000 B/s for 3 s
        rate.record(100, t)
    assert rate.measure(3000) == pytest.approx(3000 / 3.0, rel=0.05)
    # samples older than num_samples * window are purged: nothing left after 10 s of silence
    assert rate.measure(13_000) == 0.0
    assert len(rate.samples) <= 3


def test_rate_opens_a_new_sample_per_window() -> None:
    rate = Rate(num_samples=2, window_ms=1000)
    rate.record(1, 0)
    rate.record(1, 999)
    assert len(rate.samples) == 1
    rate.record(1, 1000)
    assert len(rate.samples) == 2
    rate.record(1, 2000)
    assert len(rate.samples) == 2  # the oldest dropped
    assert sum(s.value for s in rate.samples) == 2


def test_quota_manager_unthrottled_by_default() -> None:
    clock = Clock()
    q = ReplicationQuotaManager("LeaderReplication", clock=clock)
    assert q.quota == LONG_MAX
    q.record(10**12)
    assert not q.is_quota_exceeded()


def test_quota_manager_exceeded_then_recovers() -> None:
    clock = Clock()
    q = ReplicationQuotaManager("LeaderReplication", num_samples=2, window_seconds=1,
                                clock=clock)
    q.update_quota(1000)
    q.record(900)
    assert not q.is_quota_exceeded()  # 900 B over at least 1 s
    q.record(200)
    assert q.is_quota_exceeded()  # 1100 B/s > 1000
    clock.now += 1500
    assert not q.is_quota_exceeded()  # 1100 B over 1.5 s
    clock.now += 5000
    assert not q.is_quota_exceeded()
    q.update_quota(LONG_MAX)
    q.record(10**9)
    assert not q.is_quota_exceeded()


def test_throttled_partitions_per_topic() -> None:
    q = ReplicationQuotaManager("FollowerReplication")
    q.mark_throttled("a", frozenset({0, 2}))
    q.mark_throttled("b", ALL_REPLICAS)
    assert q.is_throttled("a", 0) and q.is_throttled("a", 2)
    assert not q.is_throttled("a", 1)
    assert q.is_throttled("b", 7)
    assert not q.is_throttled("c", 0)
    q.mark_throttled("a", frozenset())
    assert not q.is_throttled("a", 0)
    q.remove_throttle("b")
    assert q.throttled_topics() == {}


def test_parse_throttled_replicas() -> None:
    assert parse_throttled_replicas("*") == ALL_REPLICAS
    assert parse_throttled_replicas(("*",)) == ALL_REPLICAS
    assert parse_throttled_replicas("") == []
    assert parse_throttled_replicas("0:1, 1:2,2:0") == [(0, 1), (1, 2), (2, 0)]
    for bad in ("0", "a:1", "0:b", "0:1,*", "0-1"):
        with pytest.raises(ThrottledReplicaListError, match="literal"):
            parse_throttled_replicas(bad)


def test_throttled_partitions_keep_this_brokers_entries() -> None:
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2,2:1", 3) == frozenset()
    assert throttled_partitions("*", 3) == ALL_REPLICAS


def test_throttle_decisions() -> None:
    clock = Clock()
    q = ReplicationQuotaManager("LeaderReplication", num_samples=2, clock=clock)
    q.mark_throttled("t", frozenset({0}))
    q.update_quota(100)
    assert not should_leader_throttle(q, "t", 0, replica_in_sync=False)  # under quota
    q.record(1000)
    assert should_leader_throttle(q, "t", 0, replica_in_sync=False)
    assert not should_leader_throttle(q, "t", 0, replica_in_sync=True)  # ISR never throttled
    assert not should_leader_throttle(q, "t", 1, replica_in_sync=False)  # not throttled
    assert should_follower_throttle(q, "t", 0, replica_in_sync=False)
    assert not should_follower_throttle(q, "u", 0, replica_in_sync=False)
