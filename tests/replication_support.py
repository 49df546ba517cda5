"""Replication test support: `LocalLeaderEndpoint`, a `LeaderEndpoint` that calls a leader's
replica manager in the same process (no wait, no socket), so that tests run the production
`ReplicaFetcher` against an in-process leader; the data path is the same as over the wire.
`replica_manager` builds a replica manager on its own: without replica fetchers or ISR
writes (`NoFetchers`, `NoIsrChanges`), which such tests drive themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.server.replication.fetcher import FetcherConfig, InitialFetchState
from odradek.server.replication.leader_endpoint import (
    EpochEndOffset,
    FetchedPartition,
    FetchPartitionRequest,
    LeaderOffsetError,
)
from odradek.server.replication.partition import Partition
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.server.replication.results import FetchRequestPartition
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager


class LocalLeaderEndpoint:
    """A leader in the same process: calls its replica manager directly (no wait, no socket).
    The data path is the same as over the wire."""

    def __init__(self, leader: ReplicaManager, follower_id: int,
                 config: FetcherConfig | None = None) -> None:
        self.leader = leader
        self.follower_id = follower_id
        self.config = config or FetcherConfig()

    async def fetch(self, partitions: Mapping[TopicPartition, FetchPartitionRequest]
                    ) -> dict[TopicPartition, FetchedPartition]:
        requests = {tp: FetchRequestPartition(p.fetch_offset, p.max_bytes,
                                              p.current_leader_epoch, p.log_start_offset,
                                              p.last_fetched_epoch)
                    for tp, p in partitions.items()}
        results = self.leader.fetch_messages(self.follower_id, 0, 1,
                                             self.config.fetch_response_max_bytes, requests)
        assert isinstance(results, dict)
        return {tp: FetchedPartition(r.error, r.high_watermark, r.log_start_offset,
                                     b"".join(region.read_bytes() for region in r.regions),
                                     r.diverging_epoch)
                for tp, r in results.items()}

    async def fetch_epoch_end_offsets(self, partitions: Mapping[TopicPartition, tuple[int, int]]
                                      ) -> dict[TopicPartition, EpochEndOffset]:
        return {tp: self.leader.last_offset_for_leader_epoch(tp, current, epoch)
                for tp, (current, epoch) in partitions.items()}

    def _offset(self, tp: TopicPartition, current_leader_epoch: int, earliest: bool) -> int:
        p = self.leader.partitions.get(tp)
        if p is None:
            raise LeaderOffsetError(ErrorCode.unknown_topic_or_partition)
        if not p.is_leader:
            raise LeaderOffsetError(ErrorCode.not_leader_or_follower)
        if 0 <= current_leader_epoch < p.leader_epoch:
            raise LeaderOffsetError(ErrorCode.fenced_leader_epoch)
        if current_leader_epoch > p.leader_epoch:
            raise LeaderOffsetError(ErrorCode.unknown_leader_epoch)
        return p.log_start_offset if earliest else p.log_end_offset

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return self._offset(tp, current_leader_epoch, True)

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return self._offset(tp, current_leader_epoch, False)

    def close(self) -> None:
        pass


class NoFetchers:
    """A replica manager's fetcher manager that starts no fetcher: a follower stays where it
    is unless the test fetches for it."""

    def add_fetcher_for_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]
                                   ) -> None:
        pass

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> None:
        pass

    def is_fetching(self, tp: TopicPartition) -> bool:
        return False

    def shutdown(self) -> None:
        pass


class NoIsrChanges:
    """A replica manager's ISR tasks that neither shrink nor expand an ISR: the ISR is what
    the test sets."""

    def start(self) -> None:
        pass

    def expand_isr(self, p: Partition, new_isr: Iterable[int], follower: int) -> None:
        pass

    def shutdown(self) -> None:
        pass


def replica_manager(broker_id: int, log_manager: LogManager,
                    topic_config: Callable[[str], LogConfig], **kwargs: Any) -> ReplicaManager:
    """A replica manager without replica fetchers or ISR writes (`kwargs` as ReplicaManager's)."""
    return ReplicaManager(broker_id, log_manager, topic_config, fetcher_manager=NoFetchers(),
                          isr_manager=NoIsrChanges(), **kwargs)


__all__ = ["LocalLeaderEndpoint", "NoFetchers", "NoIsrChanges", "replica_manager"]
