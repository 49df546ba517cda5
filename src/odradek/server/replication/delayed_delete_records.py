"""Kafka's DelayedDeleteRecords: a DeleteRecords waiting in its purgatory until every live
replica's log start offset (the low watermark) reached the offset asked for."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...runtime.purgatory import DelayedOperation
from .partition import Partition
from .results import DeleteRecordsResult


class DeleteRecordsReplicaManager(Protocol):
    """What a waiting DeleteRecords reads of the replica manager."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]: ...

    def is_broker_alive(self, broker_id: int) -> bool: ...


class DelayedDeleteRecords(DelayedOperation):
    """Kafka's DelayedDeleteRecords: completes when, for every partition, the low watermark
    (the smallest log start offset of the leader and its followers on live brokers) reached
    the offset asked for, or the partition failed (no longer led here). Partitions still
    waiting at the timeout answer REQUEST_TIMED_OUT with the low watermark first seen."""

    def __init__(self, timeout_ms: int, manager: DeleteRecordsReplicaManager,
                 results: dict[TopicPartition, DeleteRecordsResult],
                 future: asyncio.Future[dict[TopicPartition, DeleteRecordsResult]]) -> None:
        super().__init__(timeout_ms)
        self.manager = manager
        self.results = results
        self.future = future
        self.waiting = {tp for tp, r in results.items() if r.error == ErrorCode.none}

    def try_complete(self) -> bool:
        for tp in list(self.waiting):
            partition = self.manager.partitions.get(tp)
            result = self.results[tp]
            if partition is None or not partition.is_leader:
                result.error = (ErrorCode.unknown_topic_or_partition if partition is None
                                else ErrorCode.not_leader_or_follower)
                result.low_watermark = -1
                self.waiting.discard(tp)
                continue
            low = partition.low_watermark(self.manager.is_broker_alive)
            if low >= result.requested_offset:
                result.low_watermark = low
                self.waiting.discard(tp)
        return not self.waiting and self.force_complete()

    def on_complete(self) -> None:
        if self.timed_out:
            for tp in self.waiting:
                self.results[tp].error = ErrorCode.request_timed_out
        if not self.future.done():
            self.future.set_result(self.results)


__all__ = ["DelayedDeleteRecords", "DeleteRecordsReplicaManager"]
