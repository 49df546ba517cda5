"""One fetch's reads from this broker's logs: Kafka's ReplicaManager.readFromLocalLog, with
findPreferredReadReplica (KIP-392) and the KIP-320 diverging-epoch check, for Fetch requests
and their DelayedFetch (S-3.6; docs/design.md: the hot paths never parse records).

Consumers read below the HW, read_committed ones below the last stable offset with the aborted
transactions of what they read (KIP-98), followers below the LEO; a follower that fetches at the
leader's log end in its latest epoch is answered "nothing new" without a log read or an epoch
lookup (the idle follower, thousands of times a second at 10,000 partitions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ..metadata_cache import MetadataCache
from ..quotas.replication_quota import ReplicationQuotaManager
from .diverging_epoch import READ as EPOCH_READ
from .diverging_epoch import check_last_fetched_epoch
from .fetch_topic_ids import has_consistent_topic_id
from .partition import Partition
from .replica_selector import ClientMetadata, ReplicaView, preferred_read_replica
from .results import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchRequestPartition,
    FetchResult,
    error_code_for,
)

log = logging.getLogger("odradek.replica_manager")  # Kafka logs these from ReplicaManager

# Kafka's FetchRequest.DEBUGGING_CONSUMER_ID: a consumer fetch (below the HW) that followers
# answer too (replica-verification, S-6.4).
DEBUGGING_CONSUMER_ID = -2


class ReadableReplicas(Protocol):
    """What the reads ask of the replica manager: the partition to read (or the error to
    answer) and whether the leader throttle (KIP-73) holds a follower's fetch back."""

    def leader_partition_or_error(self, tp: TopicPartition, current_leader_epoch: int = -1, *,
                                  require_leader: bool = True
                                  ) -> tuple[Partition | None, ErrorCode]: ...

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool: ...


class LocalLogReader:
    def __init__(self, broker_id: int, replicas: ReadableReplicas,
                 leader_quota: ReplicationQuotaManager, metadata_cache: MetadataCache,
                 replica_selector: str | None, clock: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        # KIP-73: bytes this leader sends to followers for throttled partitions
        self.leader_quota = leader_quota
        self.metadata_cache = metadata_cache  # live brokers' racks (KIP-392)
        # replica.selector.class (KIP-392): None, or the rack-aware selector
        self.replica_selector = replica_selector
        self.clock = clock

    def _preferred_read_replica(self, partition: Partition, client: ClientMetadata,
                                fetch_offset: int) -> int:
        """Kafka's findPreferredReadReplica: the views of the leader and its followers, racks
        from the metadata cache, handed to the selector (server/replication/replica_selector.py)."""
        now = self.clock()
        brokers = self.metadata_cache.brokers

        def rack(broker_id: int) -> str | None:
            info = brokers.get(broker_id)
            return info.rack if info is not None else None

        followers = [ReplicaView(r.broker_id, rack(r.broker_id), r.log_end_offset,
                                 now - r.last_caught_up_time_ms)
                     for r in partition.remote.values() if r.broker_id in brokers]
        leader = ReplicaView(self.broker_id, rack(self.broker_id), partition.log_end_offset)
        return preferred_read_replica(
            self.replica_selector, client.rack_id, leader, followers, fetch_offset,
            {r.broker_id: r.log_start_offset for r in partition.remote.values()})

    def read_from_local_log(self, replica_id: int, max_bytes: int,
                            requests: dict[TopicPartition, FetchRequestPartition],
                            isolation_level: int = READ_UNCOMMITTED,
                            client_metadata: ClientMetadata | None = None
                            ) -> dict[TopicPartition, FetchResult]:
        """Kafka's readFromLocalLog: each partition's result, data up to where its fetch
        stops (``fetch_limit``) and `max_bytes` in all (KIP-74: the first batch whole),
        unless the partition answers otherwise: an error, a diverging epoch (KIP-320), a
        preferred read replica (KIP-392), nothing while throttled (KIP-73)."""
        lookup = self.replicas.leader_partition_or_error
        throttle = self.replicas.should_leader_throttle
        committed = replica_id < 0 and isolation_level == READ_COMMITTED
        # Kafka's fetchOnlyFromLeader: followers always, consumers without client metadata
        from_follower_ok = replica_id == DEBUGGING_CONSUMER_ID or (
            replica_id < 0 and client_metadata is not None)
        follower = replica_id >= 0
        require_leader = not from_follower_ok
        selector = self.replica_selector if client_metadata is not None else None
        none = ErrorCode.none
        results: dict[TopicPartition, FetchResult] = {}
        remaining = max_bytes
        min_one = True  # KIP-74: the first batch of the response is sent whole even if too large
        for tp, req in requests.items():
            partition, code = lookup(tp, req.current_leader_epoch, require_leader=require_leader)
            if partition is not None and req.topic_id is not None \
                    and not has_consistent_topic_id(req.topic_id, partition.topic_id):
                code = ErrorCode.inconsistent_topic_id  # KIP-516: another topic's log
            if partition is None or code != none:
                results[tp] = (FetchResult(code) if partition is None else FetchResult(
                    code, partition.high_watermark, partition.log_start_offset,
                    last_stable_offset=partition.last_stable_offset))
                continue
            log_ = partition.log
            lso = log_.last_stable_offset
            if selector is not None and partition.is_leader:
                preferred = self._preferred_read_replica(partition, client_metadata,
                                                         req.fetch_offset)
                if preferred >= 0:  # no read: the consumer goes to that replica
                    results[tp] = FetchResult(
                        ErrorCode.none, partition.high_watermark, partition.log_start_offset,
                        [], 0, partition.log_end_offset, lso, preferred_read_replica=preferred)
                    continue
            fetch_offset = req.fetch_offset
            # KIP-320: does the fetcher's log diverge? Not if its last fetched epoch is our
            # latest and it fetches within our log (the check would answer "read": an idle
            # follower's case, thousands of times a second at 10,000 partitions).
            if req.last_fetched_epoch >= 0 and not (
                    req.last_fetched_epoch == log_.latest_epoch
                    and log_.log_start_offset <= fetch_offset <= log_.log_end_offset):
                check = check_last_fetched_epoch(
                    req.last_fetched_epoch, req.fetch_offset, partition.log_start_offset,
                    partition.log.end_offset_for_epoch)
                if check is not EPOCH_READ:
                    results[tp] = FetchResult(
                        check.error, partition.high_watermark, partition.log_start_offset, [], 0,
                        partition.log_end_offset, lso, diverging_epoch=check.diverging_epoch)
                    continue
            try:
                # fetch_limit, inline: the LEO for followers, else the LSO or the HW
                limit = log_.log_end_offset if follower else (
                    lso if isolation_level == READ_COMMITTED else partition.high_watermark)
                if follower and throttle(partition, replica_id):  # consumers never are
                    # KIP-73: left out of this response (no data, no error)
                    results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                              partition.log_start_offset, [], 0,
                                              partition.log_end_offset, lso)
                    continue
                if fetch_offset == limit and log_.log_start_offset <= fetch_offset \
                        <= log_.log_end_offset:
                    # nothing new (what `read` answers at its limit), without a read
                    results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                              log_.log_start_offset, [], 0,
                                              log_.log_end_offset, lso,
                                              [] if committed else None)
                    continue
                data = log_.read(fetch_offset, min(req.max_bytes, remaining),
                                 max_offset=limit, min_one_message=min_one,
                                 include_aborted_txns=committed)
            except Exception as exc:
                code = error_code_for(exc)
                if code == ErrorCode.unknown_server_error:
                    log.exception("Error reading %s-%d", *tp)
                results[tp] = FetchResult(code, partition.high_watermark,
                                          partition.log_start_offset, last_stable_offset=lso)
                continue
            regions = data.regions
            size = regions[0].size if len(regions) == 1 else sum(r.size for r in regions)
            if size and replica_id >= 0 and self.leader_quota.is_throttled(*tp):
                self.leader_quota.record(size)
            if size:
                min_one = False
                remaining = max(0, remaining - size)
            aborted = data.aborted_transactions
            results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                      partition.log_start_offset, list(data.regions), size,
                                      data.log_end_offset, lso,
                                      None if aborted is None else
                                      [(t.producer_id, t.first_offset) for t in aborted])
        return results


__all__ = ["DEBUGGING_CONSUMER_ID", "LocalLogReader", "ReadableReplicas"]
