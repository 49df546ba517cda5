"""Moving replicas between the log dirs of one broker (KIP-113): Kafka's
ReplicaManager.alterReplicaLogDirs and its ReplicaAlterLogDirsManager / Thread.

``alter_replica_log_dirs`` answers an AlterReplicaLogDirs request: for each partition the
destination must be a configured log dir (LOG_DIR_NOT_FOUND) that is online
(KAFKA_STORAGE_ERROR), and the future dir name must fit 255 bytes (INVALID_TOPIC_EXCEPTION). A
partition not hosted yet answers REPLICA_NOT_AVAILABLE (UNKNOWN_TOPIC_OR_PARTITION when the
metadata cache does not know it either) and its log is created in that dir when a LeaderAndIsr
brings it (``LogManager.preferred_log_dirs``). Moving to
the current dir is a no-op (and abandons a move elsewhere in progress, as a move to another dir
replaces one in progress). Otherwise the future log ``<topic>-<p>.<uuid>-future`` is created in
the destination and the mover starts.

The mover (``ReplicaAlterLogDirsManager``, one task per broker, one partition at a time as
Kafka's thread) copies whole batches from the current log into the future log with
``append_as_follower`` (no record is parsed), follows the current log's log start offset and
truncations (the future log starts at the log start offset; when that lies inside a batch,
after DeleteRecords, the future log restarts at the batch's base offset and takes it whole, as
Kafka's appendRecordsToFollowerOrFutureReplica does; it starts with the producer state the
current log had there, so that transactions open across its start stay open), and when the
future log has caught up (same log end offset, checked and swapped with no await in between:
nothing can append to the partition meanwhile, Kafka's leaderIsrUpdateLock) replaces the current
log with it (``LogManager.replace_current_with_future_log``). The bytes copied count against
the dynamic broker config ``replica.alter.log.dirs.io.max.bytes.per.second`` (a KIP-73
``ReplicationQuotaManager``); while it is exceeded the mover waits. A future log loaded at
start-up resumes once its partition is hosted again (LeaderAndIsr).

``next_step`` is the pure decision of one round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...protocol.records import iter_headers
from ...storage.errors import KafkaStorageError
from ...storage.log import Log
from ...storage.log_manager import LogDirNotFoundError, LogManager
from ...storage.partition_metadata import write_partition_metadata
from ..quotas.replication_quota import ReplicationQuotaManager
from .partition import Partition

log = logging.getLogger("odradek.replica_alter_log_dirs")

ALTER_LOG_DIRS_IO_MAX_BYTES = "replica.alter.log.dirs.io.max.bytes.per.second"
DEFAULT_CHUNK_BYTES = 1048576  # replica.fetch.max.bytes
THROTTLED_BACKOFF_S = 0.05


@dataclass(frozen=True, slots=True)
class MoveStep:
    """What the mover does next for one partition: "reset" (the future log restarts empty at
    `offset`, the current log start offset), "truncate" (the future log to `offset`), "copy"
    (batches from `offset`, the future log end offset) or "swap"."""

    action: str
    offset: int = -1


def next_step(current_log_start: int, current_leo: int, future_leo: int,
              future_epoch_end: int | None) -> MoveStep:
    """One round of the mover (Kafka's ReplicaAlterLogDirsThread: OFFSET_OUT_OF_RANGE, then
    truncation by leader epoch, then fetch; the swap once caught up). `future_epoch_end` is
    the end offset, in the current log, of the future log's latest leader epoch (None when
    either has no epoch)."""
    if future_leo < current_log_start:
        return MoveStep("reset", current_log_start)
    target = future_leo
    if future_epoch_end is not None:
        target = min(target, future_epoch_end)
    target = min(target, current_leo)
    if target < future_leo:
        return MoveStep("truncate", max(target, current_log_start))
    if future_leo == current_leo:
        return MoveStep("swap")
    return MoveStep("copy", future_leo)


class ReplicaAlterLogDirsManager:
    """The moves in progress on one broker and the task copying them. `partitions` returns
    the hosted partition of a topic partition (None when not hosted); `offline` whether it is
    offline (KIP-112)."""

    def __init__(self, log_manager: LogManager,
                 partitions: Callable[[TopicPartition], Partition | None],
                 offline: Callable[[TopicPartition], bool],
                 known: Callable[[TopicPartition], bool] = lambda _tp: True,
                 quota: ReplicationQuotaManager | None = None,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.log_manager = log_manager
        self._partition = partitions
        self._offline = offline
        self._known = known
        self.quota = quota or ReplicationQuotaManager("AlterLogDirs")
        self.chunk_bytes = max(1, chunk_bytes)
        self.moving: dict[TopicPartition, None] = {}  # in order of addition
        self.completed = 0
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._shut_down = False

    # -- AlterReplicaLogDirs ---------------------------------------------------------------------

    def alter_replica_log_dirs(self, assignments: dict[TopicPartition, str]
                               ) -> dict[TopicPartition, ErrorCode]:
        return {tp: self._alter_one(tp, d) for tp, d in assignments.items()}

    def _alter_one(self, tp: TopicPartition, log_dir: str) -> ErrorCode:
        lm = self.log_manager
        tp = TopicPartition(tp[0], tp[1])
        try:
            if len(f"{tp[0]}-{tp[1]}.{'0' * 32}-future".encode()) > 255:
                return ErrorCode.invalid_topic_exception  # KAFKA-4893
            dest = lm.check_log_dir(log_dir)
            if self._offline(tp):
                raise KafkaStorageError(f"Partition {tp[0]}-{tp[1]} is offline")
            p = self._partition(tp)
            future = lm.get_future_log(*tp)
            if p is not None and future is not None and future.dir.parent != dest:
                self.remove(tp)
                lm.delete_future_log(*tp)
            lm.maybe_update_preferred_log_dir(tp, dest)
            if p is None:
                return (ErrorCode.replica_not_available if self._known(tp)
                        else ErrorCode.unknown_topic_or_partition)
            if p.log.dir.parent == dest:
                return ErrorCode.none
            future = lm.create_future_log(tp[0], tp[1], dest)
            if p.topic_id is not None:
                # Kafka creates the future log with the partition's topic id: its
                # partition.metadata moves with the swap. A failed write is only logged, as the
                # replica manager's is: after a restart the controller's LeaderAndIsr writes it.
                try:
                    write_partition_metadata(future.dir, p.topic_id)
                except OSError as exc:
                    log.warning("Error writing the partition metadata file of %s-%d: %s",
                                tp[0], tp[1], exc)
            self.add(tp)
            return ErrorCode.none
        except LogDirNotFoundError as exc:
            log.warning("Unable to alter the log dir of %s-%d: %s", tp[0], tp[1], exc)
            return ErrorCode.log_dir_not_found
        except KafkaStorageError as exc:
            log.warning("Unable to alter the log dir of %s-%d: %s", tp[0], tp[1], exc)
            return ErrorCode.kafka_storage_error
        except OSError as exc:  # reported to the failure channel by the log manager
            log.warning("Unable to alter the log dir of %s-%d: %s", tp[0], tp[1], exc)
            return ErrorCode.kafka_storage_error
        except Exception:  # Kafka's Errors.forException of anything else
            log.exception("Error while altering the log dir of %s-%d", tp[0], tp[1])
            return ErrorCode.unknown_server_error

    # -- the moves -------------------------------------------------------------------------------

    def add(self, tp: TopicPartition) -> None:
        """Move `tp` (its future log exists) from now on."""
        self.moving[TopicPartition(tp[0], tp[1])] = None
        self._ensure_task()
        if self._wake is not None:
            self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.moving.pop(TopicPartition(tp[0], tp[1]), None)

    def maybe_resume(self, tp: TopicPartition) -> None:
        """A partition became hosted: a future log of it (loaded at start-up) moves on."""
        future = self.log_manager.get_future_log(tp[0], tp[1])
        if future is not None and tp not in self.moving:
            log.info("Resuming the move of %s-%d to %s", tp[0], tp[1], future.dir.parent)
            self.add(tp)

    def future_dir(self, tp: TopicPartition) -> Path | None:
        future = self.log_manager.get_future_log(tp[0], tp[1])
        return None if future is None else future.dir.parent

    def _ensure_task(self) -> None:
        if self._shut_down or (self._task is not None and not self._task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (unit tests drive ``step`` themselves)
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._run(), name="ReplicaAlterLogDirsThread")

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._shut_down:
            if not self.moving:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.quota.is_quota_exceeded():
                await asyncio.sleep(THROTTLED_BACKOFF_S)
                continue
            tp = next(iter(self.moving))
            try:
                self.step(tp)
            except Exception:
                log.exception("Error while moving %s-%d; the move stops", tp[0], tp[1])
                self.remove(tp)
            await asyncio.sleep(0)

    def step(self, tp: TopicPartition) -> str:
        """One round for `tp` (on the loop that owns the logs): the action taken, "idle"
        when the partition cannot move now (not hosted: it resumes with ``maybe_resume``)."""
        lm = self.log_manager
        p = self._partition(tp)
        future = lm.get_future_log(tp[0], tp[1])
        if p is None or future is None or self._offline(tp):
            self.remove(tp)
            return "idle"
        current = p.log
        epoch = future.latest_epoch
        epoch_end = None
        if epoch is not None:
            found = current.end_offset_for_epoch(epoch)
            epoch_end = None if found is None else found[1]
        decision = next_step(current.log_start_offset, current.log_end_offset,
                             future.log_end_offset, epoch_end)
        if decision.action == "reset":
            future.truncate_fully_and_start_at(decision.offset)
        elif decision.action == "truncate":
            future.truncate_to(decision.offset)
        elif decision.action == "copy":
            self._copy(current, future, decision.offset, p.high_watermark)
        else:
            self._swap(tp, p)
        return decision.action

    def _copy(self, current: Log, future: Log, offset: int, high_watermark: int) -> None:
        data = current.read(offset, self.chunk_bytes, None, min_one_message=True)
        payload = data.read_bytes()
        if payload:
            self._append(current, future, payload)
            self.quota.record(len(payload))
        if current.log_start_offset > future.log_start_offset:
            future.high_watermark = min(high_watermark, future.log_end_offset)
            with contextlib.suppress(Exception):
                future.maybe_increment_log_start_offset(
                    min(current.log_start_offset, future.log_end_offset))
        future.high_watermark = min(high_watermark, future.log_end_offset)

    def _append(self, current: Log, future: Log, payload: bytes) -> None:
        """Copy `payload` (whole batches of the current log) into the future log. The first
        batch copied into an empty future log may begin below its log end offset: the current
        log's log start offset lies inside it (DeleteRecords). As Kafka's
        Partition.appendRecordsToFollowerOrFutureReplica, the future log then restarts at the
        batch's base offset and takes it whole; its log start offset follows the current
        log's afterwards (``_copy``). An empty future log also starts with the current log's
        producer state as of its start offset (``Log.producers_at``): a transaction open there
        stays open in the moved log, whose last stable offset, producers and aborted
        transactions are the current log's. (Kafka's future log starts without them.)"""
        first = next(iter_headers(payload), None)
        if first is not None and future.size == 0:
            leo = future.log_end_offset
            if first.base_offset < leo <= first.last_offset:
                log.info("Unexpected offset in append to %s: first offset %d is less than its "
                         "log start offset %d. Since this is the first batch appended to the "
                         "future replica's log, it starts at offset %d", future.name,
                         first.base_offset, leo, first.base_offset)
                future.truncate_fully_and_start_at(first.base_offset)
            future.restore_producers(current.producers_at(future.log_end_offset))
        future.append_as_follower(payload)

    def _swap(self, tp: TopicPartition, p: Partition) -> None:
        new = self.log_manager.replace_current_with_future_log(tp[0], tp[1])
        p.log = new
        new.high_watermark = p.high_watermark
        self.remove(tp)
        self.completed += 1
        log.info("Moved %s-%d to %s", tp[0], tp[1], new.dir.parent)

    # -- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self._shut_down = True
        self.moving.clear()
        if self._task is not None:
            self._task.cancel()


__all__ = ["ALTER_LOG_DIRS_IO_MAX_BYTES", "MoveStep", "ReplicaAlterLogDirsManager",
           "next_step"]
