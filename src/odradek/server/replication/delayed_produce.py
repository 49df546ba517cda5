"""Kafka's DelayedProduce: a produce with acks=all waiting in the produce purgatory until the
high watermark passes what it appended (S-3.5, S-3.6; docs/design.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Set
from typing import Protocol

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...runtime.purgatory import DelayedOperation
from .partition import Partition
from .results import ProduceResult


class ProduceReplicaManager(Protocol):
    """What a waiting produce reads of the replica manager."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]: ...

    @property
    def offline_partitions(self) -> Set[TopicPartition]: ...

    def min_insync_replicas(self, topic: str) -> int: ...


class DelayedProduce(DelayedOperation):
    """acks=all: completes when every partition's HW reached its last appended offset + 1 (with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR that has it is smaller than
    min.insync.replicas), or the leader lost leadership (Kafka's DelayedProduce and
    checkEnoughReplicasReachOffset). A deposed leader never acknowledges: it answers
    NOT_LEADER_OR_FOLLOWER or the request times out."""

    def __init__(self, timeout_ms: int, manager: ProduceReplicaManager,
                 pending: dict[TopicPartition, ProduceResult],
                 future: asyncio.Future[dict[TopicPartition, ProduceResult]]) -> None:
        super().__init__(timeout_ms)
        self.manager = manager
        self.pending = pending
        self.future = future
        self.waiting = {tp for tp, r in pending.items() if r.error == ErrorCode.none}

    def try_complete(self) -> bool:
        for tp in list(self.waiting):
            partition = self.manager.partitions.get(tp)
            result = self.pending[tp]
            if partition is None or not partition.is_leader:
                result.error = (ErrorCode.kafka_storage_error
                                if tp in self.manager.offline_partitions
                                else ErrorCode.not_leader_or_follower)
                self.waiting.discard(tp)
            elif partition.high_watermark > result.last_offset:
                if len(partition.maximal_isr) < self.manager.min_insync_replicas(tp[0]):
                    result.error = ErrorCode.not_enough_replicas_after_append
                self.waiting.discard(tp)
        return not self.waiting and self.force_complete()

    def on_complete(self) -> None:
        if self.timed_out:
            for tp in self.waiting:
                self.pending[tp].error = ErrorCode.request_timed_out
        if not self.future.done():
            self.future.set_result(self.pending)


__all__ = ["DelayedProduce", "ProduceReplicaManager"]
