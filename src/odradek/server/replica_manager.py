"""The replica manager: this broker's partitions, appends, reads, and their purgatories.

Produce: validate each partition's record set by batch headers and CRC (never records), append on
the leader, and for acks=all wait in the produce purgatory until the HW passes the last offset
(S-3.5, S-3.6). Fetch: read file regions below the HW (consumers) or the LEO (followers); if
fewer than min_bytes are ready, wait in the fetch purgatory until an append or HW move completes
the DelayedFetch, or max_wait passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import records as rb
from ..storage.log import Log, LogConfig
from ..storage.log_manager import LogManager
from .partition import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    Partition,
    UnknownLeaderEpochError,
)
from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .timer import AsyncTimerDriver, Timer

log = logging.getLogger("odradek.replica_manager")

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass(slots=True)
class FetchRequestPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    regions: list[Any] = field(default_factory=list)
    size: int = 0


def _error_for(exc: Exception) -> ErrorCode:
    from ..storage import log as storage_log
    from ..storage import producer_state

    mapping: list[tuple[type[BaseException], ErrorCode]] = [
        (NotLeaderError, ErrorCode.not_leader_or_follower),
        (NotEnoughReplicasError, ErrorCode.not_enough_replicas),
        (FencedLeaderEpochError, ErrorCode.fenced_leader_epoch),
        (UnknownLeaderEpochError, ErrorCode.unknown_leader_epoch),
        (rb.CorruptRecordError, ErrorCode.corrupt_message),
        (rb.InvalidRecordError, ErrorCode.invalid_record),
        (storage_log.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
        (producer_state.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
        (producer_state.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    ]
    for cls, code in mapping:
        if isinstance(exc, cls):
            return code
    code = getattr(exc, "error_code", None)  # storage errors carry Kafka's code
    if isinstance(code, int) and code > 0:
        return ErrorCode(code)
    return ErrorCode.unknown_server_error


class DelayedProduce(DelayedOperation):
    """acks=all: completes when every partition's HW reached its last appended offset + 1, or
    the leader lost leadership / the ISR shrank (Kafka's DelayedProduce)."""

    def __init__(self, timeout_ms: int, manager: ReplicaManager,
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
                result.error = ErrorCode.not_leader_or_follower
                self.waiting.discard(tp)
            elif partition.high_watermark > result.last_offset:
                self.waiting.discard(tp)
            elif len(partition.isr) < self.manager.min_insync_replicas(tp[0]):
                result.error = ErrorCode.not_enough_replicas_after_append
                self.waiting.discard(tp)
        return not self.waiting and self.force_complete()

    def on_complete(self) -> None:
        if self.timed_out:
            for tp in self.waiting:
                self.pending[tp].error = ErrorCode.request_timed_out
        if not self.future.done():
            self.future.set_result(self.pending)


class DelayedFetch(DelayedOperation):
    """Waits until min_bytes are readable across the fetched partitions, or max_wait passes."""

    def __init__(self, max_wait_ms: int, manager: ReplicaManager, replica_id: int,
                 min_bytes: int, max_bytes: int,
                 requests: dict[TopicPartition, FetchRequestPartition],
                 future: asyncio.Future[dict[TopicPartition, FetchResult]]) -> None:
        super().__init__(max_wait_ms)
        self.manager = manager
        self.replica_id = replica_id
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.requests = requests
        self.future = future

    def try_complete(self) -> bool:
        available = 0
        for tp, req in self.requests.items():
            partition = self.manager.partitions.get(tp)
            if partition is None or not partition.is_leader:
                return self.force_complete()  # an error to report now
            end = (partition.log_end_offset if self.replica_id >= 0
                   else partition.high_watermark)
            if req.fetch_offset > end or req.fetch_offset < partition.log_start_offset:
                return self.force_complete()
            if req.fetch_offset < end:
                available += self.manager.bytes_between(partition, req.fetch_offset, end,
                                                        req.max_bytes)
                if available >= self.min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.manager.read_from_local_log(
                self.replica_id, self.max_bytes, self.requests))


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager,
                 topic_config: Callable[[str], LogConfig],
                 clock: Callable[[], int] = _now_ms) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.clock = clock
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce", Timer())
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedFetch] = \
            DelayedOperationPurgatory("Fetch", Timer())
        self._drivers = [AsyncTimerDriver(self.produce_purgatory.timer),
                         AsyncTimerDriver(self.fetch_purgatory.timer)]

    def start(self) -> None:
        for d in self._drivers:
            d.start()

    def shutdown(self) -> None:
        for d in self._drivers:
            d.stop()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()

    def min_insync_replicas(self, topic: str) -> int:
        return self.topic_config(topic).min_insync_replicas

    # -- partition lifecycle (LeaderAndIsr / StopReplica, or the solo controller) -----------
    def get_or_create_partition(self, topic: str, index: int) -> Partition:
        tp = (topic, index)
        p = self.partitions.get(tp)
        if p is None:
            log_: Log = self.log_manager.get_or_create_log(topic, index)
            p = Partition(topic, index, log_, self.broker_id)
            self.partitions[tp] = p
        return p

    def make_leader(self, topic: str, index: int, leader_epoch: int, isr: list[int],
                    replicas: list[int]) -> Partition:
        p = self.get_or_create_partition(topic, index)
        p.make_leader(leader_epoch, isr, replicas, self.clock())
        return p

    def become_leader_or_follower(self, tp: TopicPartition, leader: int, leader_epoch: int,
                                  isr: list[int], replicas: list[int], partition_epoch: int,
                                  leader_endpoint: tuple[str, int] | None = None) -> ErrorCode:
        """Apply one partition state of a LeaderAndIsr request (Kafka's
        becomeLeaderOrFollower): an older leader epoch is refused (STALE_CONTROLLER_EPOCH, as
        Kafka 2.x answers), the same epoch only refreshes ISR and replicas."""
        if self.broker_id not in replicas:
            return ErrorCode.unknown_topic_or_partition
        current = self.partitions.get(tp)
        if current is not None and leader_epoch < current.leader_epoch:
            return ErrorCode.stale_controller_epoch
        if current is not None and leader_epoch == current.leader_epoch \
                and current.leader_id == leader:
            current.isr, current.replicas = list(isr), list(replicas)
            current.zk_version = max(current.zk_version, partition_epoch)
            return ErrorCode.none
        p = self.get_or_create_partition(*tp)
        if leader == self.broker_id:
            p.make_leader(leader_epoch, isr, replicas, self.clock())
        else:
            p.make_follower(leader, leader_epoch, isr, replicas)
        p.zk_version = partition_epoch
        # Waiting produces and fetches re-check: a former leader answers NOT_LEADER now.
        self._after_append(tp)
        return ErrorCode.none

    def stop_replica_request(self, tp: TopicPartition, leader_epoch: int,
                             delete: bool) -> ErrorCode:
        """StopReplica from the controller (leader epoch -2: the topic is being deleted)."""
        p = self.partitions.get(tp)
        if p is not None and 0 <= leader_epoch < p.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if p is None:
            if delete and self.log_manager.get_log(*tp) is not None:
                self.log_manager.delete_log(*tp)
            return ErrorCode.none
        self.stop_replica(tp[0], tp[1], delete)
        return ErrorCode.none

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        p = self.partitions.pop((topic, index), None)
        for purgatory in (self.produce_purgatory, self.fetch_purgatory):
            purgatory.check_and_complete((topic, index))
        if delete:
            self.log_manager.delete_log(topic, index)
        elif p is not None:
            p.log.flush()

    # -- produce ----------------------------------------------------------------------------
    def append_records(self, acks: int, timeout_ms: int,
                       entries: dict[TopicPartition, bytes | None]
                       ) -> dict[TopicPartition, ProduceResult] | asyncio.Future[Any]:
        now = self.clock()
        results: dict[TopicPartition, ProduceResult] = {}
        for tp, data in entries.items():
            results[tp] = self._append_one(tp, data, acks, now)
        if acks != -1 or all(r.error != ErrorCode.none for r in results.values()):
            return results
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op = DelayedProduce(timeout_ms, self, results, future)
        self.produce_purgatory.try_complete_else_watch(op, list(results))
        return future

    def _append_one(self, tp: TopicPartition, data: bytes | None, acks: int,
                    now: int) -> ProduceResult:
        partition = self.partitions.get(tp)
        if partition is None:
            return ProduceResult(ErrorCode.unknown_topic_or_partition)
        config = self.topic_config(tp[0])
        try:
            if not data:
                raise rb.InvalidRecordError("empty record set")
            headers = rb.validate_batches(data)
            for h in headers:
                if h.size > config.max_message_bytes:
                    return ProduceResult(
                        ErrorCode.message_too_large,
                        message=f"batch of {h.size} bytes exceeds max.message.bytes "
                                f"{config.max_message_bytes}")
                if h.is_transactional:
                    raise rb.InvalidRecordError("transactional batches are not supported")
            buf = bytearray(data)
            info = partition.append_records_to_leader(
                buf, headers, acks, config.min_insync_replicas, now)
        except Exception as exc:  # every failure is a per-partition error code
            code = _error_for(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("Error appending to %s-%d", *tp)
            else:
                log.debug("Produce to %s-%d failed: %s", tp[0], tp[1], exc)
            return ProduceResult(code, message=str(exc))
        if not getattr(info, "duplicate", False):
            self._after_append(tp)
        return ProduceResult(ErrorCode.none, info.first_offset, info.last_offset,
                             info.log_append_time, partition.log_start_offset)

    def _after_append(self, tp: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)

    # -- fetch ------------------------------------------------------------------------------
    def fetch_messages(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                       requests: dict[TopicPartition, FetchRequestPartition]
                       ) -> dict[TopicPartition, FetchResult] | asyncio.Future[Any]:
        results = self.read_from_local_log(replica_id, max_bytes, requests)
        total = sum(r.size for r in results.values())
        errors = any(r.error != ErrorCode.none for r in results.values())
        if max_wait_ms <= 0 or not requests or total >= min_bytes or errors:
            return results
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, max_bytes, requests, future)
        self.fetch_purgatory.try_complete_else_watch(op, list(requests))
        return future

    def read_from_local_log(self, replica_id: int, max_bytes: int,
                            requests: dict[TopicPartition, FetchRequestPartition]
                            ) -> dict[TopicPartition, FetchResult]:
        results: dict[TopicPartition, FetchResult] = {}
        remaining = max_bytes
        min_one = True  # KIP-74: the first batch of the response is sent whole even if too large
        for tp, req in requests.items():
            partition = self.partitions.get(tp)
            if partition is None:
                code = (ErrorCode.not_leader_or_follower
                        if self.log_manager.get_log(*tp) is not None
                        else ErrorCode.unknown_topic_or_partition)
                results[tp] = FetchResult(code)
                continue
            try:
                if not partition.is_leader:
                    raise NotLeaderError(f"not the leader of {tp[0]}-{tp[1]}")
                partition.check_leader_epoch(req.current_leader_epoch)
                limit = (partition.log_end_offset if replica_id >= 0
                         else partition.high_watermark)
                data = partition.log.read(req.fetch_offset, min(req.max_bytes, remaining),
                                          max_offset=limit, min_one_message=min_one)
            except Exception as exc:
                code = _error_for(exc)
                if code == ErrorCode.unknown_server_error:
                    log.exception("Error reading %s-%d", *tp)
                results[tp] = FetchResult(code, partition.high_watermark,
                                          partition.log_start_offset)
                continue
            size = sum(r.size for r in data.regions)
            if size:
                min_one = False
                remaining = max(0, remaining - size)
            results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                      partition.log_start_offset, list(data.regions), size)
        return results

    def bytes_between(self, partition: Partition, start: int, end: int, cap: int) -> int:
        """Bytes readable from `start` up to `end` (at most `cap`), for DelayedFetch."""
        try:
            data = partition.log.read(start, cap, max_offset=end, min_one_message=True)
        except Exception:
            return cap
        return sum(r.size for r in data.regions)
