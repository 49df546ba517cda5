"""Kafka's DelayedFetch: a fetch waiting in the fetch purgatory until `min_bytes` are readable
across its partitions, or `max_wait_ms` passes (S-3.6; docs/design.md).

A consumer's fetch is watched under each of its partitions, as Kafka does; a follower's, which
names thousands of partitions at scale, under one key per fetching replica
(``FollowerFetchKey``), and re-checked only for the partition that changed
(``DelayedFetch.try_complete_for``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping, Set
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...runtime.purgatory import DelayedOperation
from .partition import Partition
from .replica_selector import ClientMetadata
from .results import READ_UNCOMMITTED, FetchRequestPartition, FetchResult, fetch_limit


class FetchReplicaManager(Protocol):
    """What a waiting fetch reads of the replica manager: its partitions, the KIP-73 leader
    throttle, the bytes readable, and the read that answers it."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]: ...

    @property
    def offline_partitions(self) -> Set[TopicPartition]: ...

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool: ...

    def bytes_between(self, partition: Partition, start: int, end: int, cap: int) -> int: ...

    def read_from_local_log(self, replica_id: int, max_bytes: int,
                            requests: dict[TopicPartition, FetchRequestPartition],
                            isolation_level: int = READ_UNCOMMITTED,
                            client_metadata: ClientMetadata | None = None
                            ) -> dict[TopicPartition, FetchResult]: ...


@dataclass(frozen=True, slots=True)
class FollowerFetchKey:
    """The one purgatory key a follower's waiting fetch is watched under (a `TopicPartition`
    key per partition meant registering and dropping ~3,333 keys per idle fetch at 10,000
    partitions). Whatever moves a partition's state checks the waiting fetches of every
    fetching replica for that partition (`ReplicaPurgatories.check_fetches`); each looks at it
    only if it fetches it."""

    replica_id: int


class DelayedFetch(DelayedOperation):
    """Waits until min_bytes are readable across the fetched partitions, or max_wait passes."""

    def __init__(self, max_wait_ms: int, manager: FetchReplicaManager, replica_id: int,
                 min_bytes: int, max_bytes: int,
                 requests: dict[TopicPartition, FetchRequestPartition],
                 future: asyncio.Future[dict[TopicPartition, FetchResult]],
                 isolation_level: int = READ_UNCOMMITTED,
                 client_metadata: ClientMetadata | None = None) -> None:
        super().__init__(max_wait_ms)
        self.manager = manager
        self.isolation_level = isolation_level
        self.client_metadata = client_metadata  # a consumer that may read from a follower
        self.replica_id = replica_id
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.requests = requests
        self.future = future
        # bytes readable per partition at the last whole check, and their sum: a re-check for
        # one partition (try_complete_for) updates only its entry
        self._available: dict[TopicPartition, int] | None = None
        self._total = 0
        # a follower's empty first read (result, partition object), kept for the timeout's
        # answer, and the partitions re-checked since (read again then)
        self._first_read: Mapping[TopicPartition, FetchResult] | None = None
        self._moved: set[TopicPartition] = set()

    def _readable(self, tp: TopicPartition, req: FetchRequestPartition) -> int | None:
        """Bytes readable for `tp` now; None when the fetch must be answered at once (an
        error to report)."""
        partition = self.manager.partitions.get(tp)
        if partition is None or (not partition.is_leader and self.client_metadata is None):
            return None
        end = fetch_limit(partition, self.replica_id, self.isolation_level)
        if req.fetch_offset > end or req.fetch_offset < partition.log_start_offset:
            return None
        if req.fetch_offset < end and not self.manager.should_leader_throttle(
                partition, self.replica_id):  # KIP-73: throttled bytes do not count
            if self.min_bytes <= 1:
                # a record batch lies below `end`: at least one byte, all that a fetch.min.bytes
                # (or replica.fetch.min.bytes) of 1, both defaults, asks; the log is not read
                return 1
            return self.manager.bytes_between(partition, req.fetch_offset, end, req.max_bytes)
        return 0

    def try_complete(self) -> bool:
        available = 0
        per_partition: dict[TopicPartition, int] = {}
        for tp, req in self.requests.items():
            n = self._readable(tp, req)
            if n is None:
                return self.force_complete()
            per_partition[tp] = n
            available += n
            if available >= self.min_bytes:
                return self.force_complete()
        self._available, self._total = per_partition, available
        return False

    def seed(self, results: Mapping[TopicPartition, FetchResult]) -> None:
        """The bytes readable per partition as the read that made this fetch wait found them
        (with `try_complete_else_watch(tried=True)`: no second and third whole check). A
        follower's fetch that found nothing keeps that read for its timeout's answer."""
        available = {tp: 0 for tp in self.requests}
        total = 0
        for tp, r in results.items():
            if tp in available:
                available[tp] = r.size
                total += r.size
        self._available, self._total = available, total
        if self.replica_id >= 0 and total == 0 and len(results) == len(self.requests):
            self._first_read = results  # (the caller's, not used after it is seeded)

    def _still(self, tp: TopicPartition, r: FetchResult) -> bool:
        """A follower's first, empty read of `tp` still stands: still leader in the epoch
        asked, the same HW, log start and log end offsets (the last stable offset moves only
        with an append or the HW; a partition replaced or stopped is notified)."""
        p = self.manager.partitions.get(tp)
        if p is None or r.error != ErrorCode.none or not p.is_leader:
            return False
        req = self.requests[tp]
        log_ = p.log
        return (p.high_watermark == r.high_watermark
                and log_.log_end_offset == r.leader_end_offset
                and log_.log_start_offset == r.log_start_offset
                and (req.current_leader_epoch < 0
                     or req.current_leader_epoch == p.leader_epoch))

    def try_complete_for(self, key: Hashable) -> bool:
        # Only `key` moved: re-checking every partition for each of thousands of partition
        # changes (a LeaderAndIsr, ISR updates) made a follower's fetch quadratic.
        available = self._available
        tp: Any = key
        req = self.requests.get(tp)
        if req is None:  # (a follower's fetch, told of a partition it does not fetch)
            return False
        if self._first_read is not None:
            self._moved.add(tp)
        if available is None or tp not in available:
            return self.try_complete()
        n = self._readable(tp, req)
        if n is None:
            return self.force_complete()
        self._total += n - available[tp]
        available[tp] = n
        if self._total >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.future.done():
            return
        first = self._first_read
        if first is None:
            self.future.set_result(self.manager.read_from_local_log(
                self.replica_id, self.max_bytes, self.requests, self.isolation_level,
                self.client_metadata))
            return
        # A follower's fetch that found nothing, timing out (twice a second per fetcher at
        # 10,000 partitions) or completed by an append to one of its partitions: read again
        # only the partitions that moved since the first read, and those whose offsets no
        # longer match it; the others' answer is that read's, what reading them again would
        # answer (empty, as they were: they add nothing to the response's size, so the
        # others' share of fetch.max.bytes and KIP-74's first whole batch are the same).
        moved, offline = self._moved, self.manager.offline_partitions
        again = {tp: req for tp, req in self.requests.items()
                 if tp in moved or (offline and tp in offline)
                 or not self._still(tp, first[tp])}
        fresh = self.manager.read_from_local_log(
            self.replica_id, self.max_bytes, again, self.isolation_level,
            self.client_metadata) if again else {}
        self.future.set_result({tp: fresh[tp] if tp in again else first[tp]
                                for tp in self.requests})


__all__ = ["DelayedFetch", "FetchReplicaManager", "FollowerFetchKey"]
