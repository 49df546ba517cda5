"""Group metadata and offsets in `__consumer_offsets` (Kafka's GroupMetadataManager).

* The cache: the groups of the `__consumer_offsets` partitions this broker leads ("owned"),
  plus the set of partitions being loaded (requests for their groups get
  COORDINATOR_LOAD_IN_PROGRESS) — anything else is NOT_COORDINATOR.
* Writes: group metadata (after each rebalance) and offset commits are records appended through
  the replica manager with acks=-1, so a commit is answered only once the ISR has it (HW), and
  the cache changes only then; errors of the append map to coordinator errors as in Kafka.
* Loads: a broker elected leader of an offsets partition reads the log from its start to its
  end, decoding the records (tombstones delete), one `offsets.load.buffer.size` chunk at a time
  and yielding to the loop between chunks; a broker that stops leading unloads the partition's
  groups. Loads and unloads run one at a time, in the order leadership changed (Kafka's
  single-threaded scheduler), and carry the leader epoch so that a stale one is ignored.
* Transactional offsets (KIP-98, TxnOffsetCommit): one transactional batch (the producer's id
  and epoch, no sequence) of offset records appended with the coordinator's origin; the offsets
  stay pending in the group, by producer, until the transaction's marker lands on the group's
  partition (`handle_txn_completion`), or a load meets the COMMIT/ABORT control batch.
  `open_groups_for_producer` says which groups a marker may concern.
* Cleanup: expired offsets (`offsets.retention.minutes`), deleted groups and offsets become
  tombstones appended without waiting for replication (the next run writes them again if lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import control_records as cr
from ..protocol import records as rb
from ..storage.append_origin import AppendOrigin
from . import offsets as schema
from .group import (
    CommitRecordMetadataAndOffset,
    Dead,
    Empty,
    GroupMetadata,
    MemberMetadata,
    Stable,
    TopicPartition,
)
from .offsets import OFFSETS_TOPIC, OffsetAndMetadata
from .replica_access import ReplicaAccess

log = logging.getLogger("odradek.coordinator.metadata")

INVALID_OFFSET = -1
NO_PRODUCER_ID = rb.NO_PRODUCER_ID
NO_PRODUCER_EPOCH = -1

# producer id -> (group id, partition) -> the offset and the log offset of its batch
PendingTxnOffsets = dict[int, dict[tuple[str, TopicPartition], CommitRecordMetadataAndOffset]]


@dataclass(slots=True)
class OffsetFetchResult:
    offset: int = INVALID_OFFSET
    leader_epoch: int = -1
    metadata: str = ""
    error: int = ErrorCode.none


def _map_append_error(error: int, *, for_offsets: bool) -> int:
    """A failed append to __consumer_offsets as the coordinator reports it (Kafka's mapping)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
                 ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size if for_offsets \
            else ErrorCode.unknown_server_error
    if error == ErrorCode.request_timed_out and not for_offsets:
        return ErrorCode.rebalance_in_progress
    return error


class GroupMetadataManager:
    def __init__(self, broker_id: int, replica_manager: ReplicaAccess,
                 partition_count: Callable[[], int], clock: Callable[[], int], *,
                 commit_timeout_ms: int = 5000, load_buffer_size: int = 5 * 1024 * 1024,
                 max_metadata_size: int = 4096, retention_ms: int = 7 * 24 * 3600 * 1000
                 ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self._partition_count = partition_count
        self.clock = clock
        self.commit_timeout_ms = commit_timeout_ms
        self.load_buffer_size = load_buffer_size
        self.max_metadata_size = max_metadata_size
        self.retention_ms = retention_ms
        self.groups: dict[str, GroupMetadata] = {}
        self.loading: set[int] = set()
        self.owned: set[int] = set()
        self.epoch_for_partition: dict[int, int] = {}
        # Groups with transactional offsets pending, per producer (Kafka's openGroupsForProducer).
        self.open_groups_for_producer: dict[int, set[str]] = {}
        self._jobs: asyncio.Queue[Callable[[], Awaitable[None] | None]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self.shutting_down = False
        # Awaited between two chunks of a load: yields to the loop (tests may slow it down).
        self.load_pause: Callable[[], Awaitable[None]] = lambda: asyncio.sleep(0)

    # -- lifecycle ------------------------------------------------------------------------------
    def startup(self) -> None:
        self._jobs = asyncio.Queue()
        self._worker = asyncio.create_task(self._run_jobs(),
                                           name=f"group-metadata-manager-{self.broker_id}")

    def shutdown(self) -> None:
        self.shutting_down = True
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None

    async def _run_jobs(self) -> None:
        assert self._jobs is not None
        while True:
            job = await self._jobs.get()
            try:
                result = job()
                if result is not None:
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("[GroupMetadataManager brokerId=%d] Group metadata job failed",
                              self.broker_id)

    def _schedule(self, job: Callable[[], Awaitable[None] | None]) -> None:
        if self._jobs is None:
            raise RuntimeError("the group metadata manager is not started")
        self._jobs.put_nowait(job)

    # -- ownership --------------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return schema.partition_for(group_id, self._partition_count())

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    def is_loading(self) -> bool:
        return bool(self.loading)

    def group_not_exists(self, group_id: str) -> bool:
        """True iff this broker owns the group's partition and has no live group of that id."""
        group = self.groups.get(group_id)
        return self.is_group_local(group_id) and (group is None or group.is_(Dead))

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def get_or_maybe_create_group(self, group_id: str, create: bool) -> GroupMetadata | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = GroupMetadata(group_id, Empty, self.clock)
        return group

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    def _maybe_update_epoch(self, partition: int, epoch: int | None) -> bool:
        """Remember the newest leader epoch seen for the partition; True iff `epoch` is None or
        at least that newest one (Kafka's maybeUpdateCoordinatorEpoch)."""
        current = self.epoch_for_partition.get(partition)
        if epoch is not None and (current is None or epoch > current):
            self.epoch_for_partition[partition] = current = epoch
        return epoch is None or epoch == current

    # -- writes ---------------------------------------------------------------------------------
    def _offsets_tp(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))

    def _is_local(self, tp: TopicPartition) -> bool:
        return tp in self.replica_manager.partitions

    def _append(self, tp: TopicPartition, batch: bytes, acks: int,
                callback: Callable[[int, int], None]) -> None:
        """Append one batch; callback(error, base offset) when done (acks=-1: committed)."""
        result = self.replica_manager.append_records(acks, self.commit_timeout_ms, {tp: batch},
                                                     origin=AppendOrigin.COORDINATOR)
        if isinstance(result, dict):
            r = result[tp]
            callback(r.error, r.base_offset)
            return

        def done(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled():
                callback(ErrorCode.request_timed_out, -1)
                return
            exc = fut.exception()
            if exc is not None:
                log.error("Append to %s failed", tp, exc_info=exc)
                callback(ErrorCode.unknown_server_error, -1)
                return
            r = fut.result()[tp]
            callback(r.error, r.base_offset)

        result.add_done_callback(done)

    def group_metadata_value(self, group: GroupMetadata, assignment: dict[str, bytes]
                             ) -> schema.GroupMetadataValue:
        protocol = group.protocol_name
        members = []
        for m in group.members.values():
            if protocol is None:
                raise ValueError("Attempted to write non-empty group metadata with no defined "
                                 "protocol.")
            members.append(schema.MemberRecord(
                m.member_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(protocol), assignment[m.member_id],
                m.group_instance_id))
        ts = group.current_state_timestamp
        return schema.GroupMetadataValue(group.protocol_type or "", group.generation_id,
                                         protocol, group.leader_id,
                                         -1 if ts is None else ts, tuple(members))

    def store_group(self, group: GroupMetadata, assignment: dict[str, bytes],
                    callback: Callable[[int], None]) -> None:
        """Append the group's metadata record (the new generation and its assignment)."""
        tp = self._offsets_tp(group.group_id)
        if not self._is_local(tp):
            callback(ErrorCode.not_coordinator)
            return
        now = self.clock()
        batch = rb.build_batch([(schema.group_metadata_key(group.group_id),
                                 schema.group_metadata_value(
                                     self.group_metadata_value(group, assignment)))],
                               timestamp_ms=now)
        generation = group.generation_id

        def appended(error: int, _base_offset: int) -> None:
            if error != ErrorCode.none:
                log.debug("Metadata from group %s with generation %d failed when appending "
                          "to log due to %s", group.group_id, generation, ErrorCode(error).name)
            callback(_map_append_error(error, for_offsets=False))

        self._append(tp, batch, -1, appended)

    def valid_metadata_length(self, metadata: str | None) -> bool:
        return metadata is None or len(metadata) <= self.max_metadata_size

    def store_offsets(self, group: GroupMetadata, member_id: str,
                      offsets: dict[TopicPartition, OffsetAndMetadata],
                      callback: Callable[[dict[TopicPartition, int]], None], *,
                      producer_id: int = NO_PRODUCER_ID,
                      producer_epoch: int = NO_PRODUCER_EPOCH) -> None:
        """Append one offset commit record per partition; the cache and the response follow
        the append's outcome. With a producer id (TxnOffsetCommit) the batch is transactional
        and the offsets stay pending until the transaction's marker."""
        valid = {tp: om for tp, om in offsets.items() if self.valid_metadata_length(om.metadata)}
        if not group.has_received_consistent_offset_commits():
            log.warning("group: %s with leader: %s has received offset commits from consumers "
                        "as well as transactional producers. Mixing both types of offset "
                        "commits will generally result in surprises and should be avoided.",
                        group.group_id, group.leader_id)
        if not valid:
            callback({tp: ErrorCode.offset_metadata_too_large for tp in offsets})
            return
        tp_log = self._offsets_tp(group.group_id)
        if not self._is_local(tp_log):
            callback({tp: ErrorCode.not_coordinator for tp in offsets})
            return
        is_txn = producer_id != NO_PRODUCER_ID
        now = self.clock()
        batch = rb.build_batch(
            [(schema.offset_commit_key(group.group_id, t, p), schema.offset_commit_value(om))
             for (t, p), om in valid.items()], timestamp_ms=now,
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=rb.NO_SEQUENCE, is_transactional=is_txn)
        if is_txn:
            self._add_producer_group(producer_id, group.group_id)
            group.prepare_txn_offset_commit(producer_id, valid)
        else:
            group.prepare_offset_commit(valid)

        def appended(error: int, base_offset: int) -> None:
            if error == ErrorCode.none:
                if not group.is_(Dead):
                    for tp, om in valid.items():
                        committed = CommitRecordMetadataAndOffset(base_offset, om)
                        if is_txn:
                            group.on_txn_offset_commit_append(producer_id, tp, committed)
                        else:
                            group.on_offset_commit_append(tp, committed)
                response_error = ErrorCode.none
            else:
                if not group.is_(Dead):
                    for tp, om in valid.items():
                        if is_txn:
                            group.fail_pending_txn_offset_commit(producer_id, tp)
                        else:
                            group.fail_pending_offset_write(tp, om)
                    if is_txn and not group.has_pending_offset_commits_from_producer(
                            producer_id):
                        self._remove_producer_group(producer_id, group.group_id)
                log.debug("Offset commit %s from group %s, consumer %s with generation %d "
                          "failed when appending to log due to %s", valid, group.group_id,
                          member_id, group.generation_id, ErrorCode(error).name)
                response_error = _map_append_error(error, for_offsets=True)
            callback({tp: response_error if tp in valid else ErrorCode.offset_metadata_too_large
                      for tp in offsets})

        self._append(tp_log, batch, -1, appended)

    # -- transaction completion (markers on __consumer_offsets) --------------------------------
    def _add_producer_group(self, producer_id: int, group_id: str) -> None:
        self.open_groups_for_producer.setdefault(producer_id, set()).add(group_id)

    def _remove_producer_group(self, producer_id: int, group_id: str) -> None:
        groups = self.open_groups_for_producer.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self.open_groups_for_producer[producer_id]

    def _remove_group_from_all_producers(self, group_id: str) -> None:
        for producer_id in list(self.open_groups_for_producer):
            self._remove_producer_group(producer_id, group_id)

    def handle_txn_completion(self, producer_id: int, completed_partitions: set[int],
                              is_commit: bool) -> None:
        """The producer's COMMIT/ABORT marker is written to `completed_partitions` of
        `__consumer_offsets`: complete the pending offsets of its groups on those partitions
        (Kafka's handleTxnCompletion). A group no longer cached here (moved, or unloaded) is
        left to the coordinator that loads the marker from the log."""
        groups = self.open_groups_for_producer.get(producer_id, set())
        for group_id in [g for g in groups if self.partition_for(g) in completed_partitions]:
            self._remove_producer_group(producer_id, group_id)
            group = self.groups.get(group_id)
            if group is None or group.is_(Dead):
                log.info("Group %s has moved away from %d after transaction marker was written "
                         "but before the cache was updated. The cache on the new group owner "
                         "will be updated instead.", group_id, self.broker_id)
                continue
            group.complete_pending_txn_offset_commit(producer_id, is_commit)
            log.debug("Completed the transactional offsets of producer %d in group %s (%s)",
                      producer_id, group_id, "commit" if is_commit else "abort")

    def get_offsets(self, group_id: str, require_stable: bool,
                    partitions: list[TopicPartition] | None
                    ) -> dict[TopicPartition, OffsetFetchResult]:
        """Committed offsets (all of the group's when `partitions` is None); never stale: the
        cache is only ever behind the log while the partition loads, and then nobody asks."""
        group = self.groups.get(group_id)
        if group is None or group.is_(Dead):
            return {tp: OffsetFetchResult() for tp in partitions or ()}
        wanted = list(group.offsets) if partitions is None else partitions
        out: dict[TopicPartition, OffsetFetchResult] = {}
        for tp in wanted:
            if require_stable and group.has_pending_offset_commits(tp):
                out[tp] = OffsetFetchResult(error=ErrorCode.unstable_offset_commit)
                continue
            om = group.offset(tp)
            out[tp] = (OffsetFetchResult() if om is None else
                       OffsetFetchResult(om.offset, om.leader_epoch, om.metadata))
        return out

    # -- loading and unloading ------------------------------------------------------------------
    def schedule_load(self, partition: int, epoch: int,
                      on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        log.info("[GroupMetadataManager brokerId=%d] Scheduling loading of offsets and group "
                 "metadata from %s-%d for epoch %d", self.broker_id, OFFSETS_TOPIC, partition,
                 epoch)
        # Requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS from now on (Kafka marks
        # the partition when the load starts; the earlier, the fewer NOT_COORDINATOR retries).
        if partition not in self.owned and (
                self.epoch_for_partition.get(partition) is None
                or epoch >= self.epoch_for_partition[partition]):
            self.loading.add(partition)
        self._schedule(lambda: self._load(partition, epoch, on_group_loaded))

    def schedule_unload(self, partition: int, epoch: int | None,
                        on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        log.info("[GroupMetadataManager brokerId=%d] Scheduling unloading of offsets and group "
                 "metadata from %s-%d", self.broker_id, OFFSETS_TOPIC, partition)
        self._schedule(lambda: self._unload(partition, epoch, on_group_unloaded))

    async def _load(self, partition: int, epoch: int,
                    on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        if not self._maybe_update_epoch(partition, epoch):
            log.info("Not loading offsets and group metadata for %s-%d in epoch %d since "
                     "current epoch is %s", OFFSETS_TOPIC, partition, epoch,
                     self.epoch_for_partition.get(partition))
            if partition not in self.owned:
                self.loading.discard(partition)
            return
        if partition in self.owned:
            log.info("Already loaded offsets and group metadata from %s-%d", OFFSETS_TOPIC,
                     partition)
            self.loading.discard(partition)
            return
        self.loading.add(partition)
        start = self.clock()
        try:
            done = await self._do_load(partition, epoch, on_group_loaded)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Error loading offsets from %s-%d", OFFSETS_TOPIC, partition)
            done = True
        if self.epoch_for_partition.get(partition) == epoch and done:
            self.owned.add(partition)
            self.loading.discard(partition)
            log.info("[GroupMetadataManager brokerId=%d] Finished loading offsets and group "
                     "metadata from %s-%d in %d milliseconds for epoch %d", self.broker_id,
                     OFFSETS_TOPIC, partition, self.clock() - start, epoch)

    def _leads(self, partition: int, epoch: int) -> bool:
        p = self.replica_manager.partitions.get((OFFSETS_TOPIC, partition))
        return (p is not None and p.is_leader
                and self.epoch_for_partition.get(partition) == epoch)

    async def _do_load(self, partition: int, epoch: int,
                       on_group_loaded: Callable[[GroupMetadata], None]) -> bool:
        """Read the partition's log to its end; False if leadership moved meanwhile."""
        p = self.replica_manager.partitions.get((OFFSETS_TOPIC, partition))
        if p is None:
            log.warning("Attempted to load offsets and group metadata from %s-%d, but found no "
                        "log", OFFSETS_TOPIC, partition)
            return True
        loaded_offsets: dict[tuple[str, TopicPartition], CommitRecordMetadataAndOffset] = {}
        pending_offsets: PendingTxnOffsets = {}
        loaded_groups: dict[str, schema.GroupMetadataValue] = {}
        removed_groups: set[str] = set()
        offset = p.log_start_offset
        while not self.shutting_down:
            if not self._leads(partition, epoch):
                log.info("Stopped loading %s-%d: no longer its leader in epoch %d",
                         OFFSETS_TOPIC, partition, epoch)
                return False
            end = p.log_end_offset
            if offset >= end:
                break
            data = p.log.read(offset, self.load_buffer_size, max_offset=end,
                              min_one_message=True)
            buf = data.read_bytes()
            if not buf:
                break
            for header in rb.iter_headers(buf):
                batch = memoryview(buf)[header.position:header.position + header.size]
                if header.is_control:
                    self._read_control_batch(batch, loaded_offsets, pending_offsets)
                else:
                    self._read_batch(batch, header, loaded_offsets, pending_offsets,
                                     loaded_groups, removed_groups)
                offset = header.next_offset
            await self.load_pause()
        if self.shutting_down or not self._leads(partition, epoch):
            return False

        by_group: dict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}
        for (group_id, tp), c in loaded_offsets.items():
            by_group.setdefault(group_id, {})[tp] = c
        # Transactions without a marker yet: their offsets stay pending in their groups.
        pending_by_group: dict[str, dict[int, dict[TopicPartition,
                                                   CommitRecordMetadataAndOffset]]] = {}
        for producer_id, producer_offsets in pending_offsets.items():
            for (group_id, tp), c in producer_offsets.items():
                pending_by_group.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = c
        for group_id, value in loaded_groups.items():
            group = self._group_from_record(group_id, value)
            self._load_group(group, by_group.pop(group_id, {}),
                             pending_by_group.pop(group_id, {}), on_group_loaded)
        # offsets-only groups (no members)
        for group_id in list(by_group) + [g for g in pending_by_group if g not in by_group]:
            self._load_group(GroupMetadata(group_id, Empty, self.clock),
                             by_group.get(group_id, {}), pending_by_group.get(group_id, {}),
                             on_group_loaded)
        for group_id in removed_groups:
            if group_id in self.groups and group_id not in by_group:
                log.warning("Unexpected unload of active group %s while loading partition "
                            "%s-%d", group_id, OFFSETS_TOPIC, partition)
        return True

    @staticmethod
    def _read_control_batch(batch: memoryview,
                            loaded_offsets: dict[tuple[str, TopicPartition],
                                                 CommitRecordMetadataAndOffset],
                            pending_offsets: PendingTxnOffsets) -> None:
        """A transaction marker: COMMIT moves the producer's pending offsets into the loaded
        ones (unless a later batch already set the partition's offset), ABORT drops them."""
        control = cr.parse_control_batch(batch)
        if control is None or control.control_type is None:
            return
        producer_id = control.header.producer_id
        if control.control_type is cr.ControlRecordType.COMMIT:
            for gtp, committed in pending_offsets.get(producer_id, {}).items():
                current = loaded_offsets.get(gtp)
                if current is None or current.older_than(committed):
                    loaded_offsets[gtp] = committed
        pending_offsets.pop(producer_id, None)

    @staticmethod
    def _read_batch(batch: memoryview, header: rb.BatchHeader,
                    loaded_offsets: dict[tuple[str, TopicPartition],
                                         CommitRecordMetadataAndOffset],
                    pending_offsets: PendingTxnOffsets,
                    loaded_groups: dict[str, schema.GroupMetadataValue],
                    removed_groups: set[str]) -> None:
        base_offset = header.base_offset
        is_txn = header.is_transactional
        for record in rb.decode_records(batch):
            if record.key is None:
                raise schema.SchemaError("Group metadata/offset entry key should not be null")
            key = schema.read_message_key(record.key)
            if isinstance(key, schema.OffsetKey):
                gtp = (key.group, TopicPartition(key.topic, key.partition))
                target = (pending_offsets.setdefault(header.producer_id, {}) if is_txn
                          else loaded_offsets)
                om = schema.read_offset_value(record.value)
                if om is None:
                    target.pop(gtp, None)
                else:
                    target[gtp] = CommitRecordMetadataAndOffset(base_offset, om)
            else:
                value = schema.read_group_value(record.value)
                if value is None:
                    loaded_groups.pop(key.group, None)
                    removed_groups.add(key.group)
                else:
                    removed_groups.discard(key.group)
                    loaded_groups[key.group] = value

    def _group_from_record(self, group_id: str, value: schema.GroupMetadataValue
                           ) -> GroupMetadata:
        members = [MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  m.rebalance_timeout_ms, m.session_timeout_ms,
                                  value.protocol_type, [(value.protocol or "", m.subscription)],
                                  m.assignment)
                   for m in value.members]
        ts = value.current_state_timestamp
        return GroupMetadata.load(group_id, Stable if members else Empty, value.generation,
                                  value.protocol_type, value.protocol, value.leader,
                                  None if ts == schema.NO_TIMESTAMP else ts, members,
                                  self.clock)

    def _load_group(self, group: GroupMetadata,
                    group_offsets: dict[TopicPartition, CommitRecordMetadataAndOffset],
                    pending_offsets: dict[int, dict[TopicPartition,
                                                    CommitRecordMetadataAndOffset]],
                    on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        group.initialize_offsets(group_offsets, pending_offsets)
        for producer_id in pending_offsets:
            self._add_producer_group(producer_id, group.group_id)
        current = self.add_group(group)
        if current is not group:
            log.debug("Attempt to load group %s from log with generation %d failed because "
                      "there is already a cached group with generation %d", group.group_id,
                      group.generation_id, current.generation_id)
            return
        log.info("Loaded group %s in state %s with generation %d, %d members, %d offsets and "
                 "pending transactional offsets of %d producers", group.group_id, group.state,
                 group.generation_id, group.size, len(group_offsets), len(pending_offsets))
        on_group_loaded(group)

    def _unload(self, partition: int, epoch: int | None,
                on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        if not self._maybe_update_epoch(partition, epoch):
            log.info("Not removing offsets and group metadata for %s-%d in epoch %s since "
                     "current epoch is %s", OFFSETS_TOPIC, partition, epoch,
                     self.epoch_for_partition.get(partition))
            return
        self.owned.discard(partition)
        self.loading.discard(partition)
        groups = offsets = 0
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) == partition:
                on_group_unloaded(group)
                if self.groups.get(group.group_id) is group:
                    del self.groups[group.group_id]
                self._remove_group_from_all_producers(group.group_id)
                groups += 1
                offsets += len(group.offsets)
        log.info("[GroupMetadataManager brokerId=%d] Finished unloading %s-%d for coordinator "
                 "epoch %s. Removed %d cached offsets and %d cached groups.", self.broker_id,
                 OFFSETS_TOPIC, partition, epoch, offsets, groups)

    # -- cleanup ----------------------------------------------------------------------------------
    def cleanup_expired(self, now_ms: int | None = None) -> int:
        """The periodic task: expire offsets, let empty groups without offsets die."""
        now = self.clock() if now_ms is None else now_ms
        removed = self.cleanup_group_metadata(
            list(self.groups.values()),
            lambda g: g.remove_expired_offsets(now, self.retention_ms))
        if removed:
            log.info("[GroupMetadataManager brokerId=%d] Removed %d expired offsets",
                     self.broker_id, removed)
        return removed

    def cleanup_group_metadata(self, groups: Iterable[GroupMetadata],
                               selector: Callable[[GroupMetadata],
                                                  dict[TopicPartition, OffsetAndMetadata]]
                               ) -> int:
        """Remove offsets chosen by `selector` from each group and write their tombstones (and
        the group's, if it is now Dead and ever had a generation)."""
        total = 0
        for group in groups:
            removed = selector(group)
            if group.is_(Empty) and not group.has_offsets():
                log.info("Group %s transitioned to Dead in generation %d", group.group_id,
                         group.generation_id)
                group.transition_to(Dead)
            tp = self._offsets_tp(group.group_id)
            if not self._is_local(tp):
                log.info("BrokerId %d is no longer a coordinator for the group %s. Proceeding "
                         "cleanup for other alive groups", self.broker_id, group.group_id)
                continue
            tombstones: list[tuple[bytes, bytes | None]] = [
                (schema.offset_commit_key(group.group_id, t, p), None) for t, p in removed]
            if (group.is_(Dead) and self.groups.get(group.group_id) is group
                    and self.groups.pop(group.group_id) is group and group.generation_id > 0):
                tombstones.append((schema.group_metadata_key(group.group_id), None))
            if tombstones:
                batch = rb.build_batch(tombstones, timestamp_ms=self.clock())

                def appended(error: int, _base: int, n: int = len(tombstones),
                             g: str = group.group_id, p: int = tp.partition) -> None:
                    if error != ErrorCode.none:
                        log.error("Failed to append %d tombstones to %s-%d for expired/deleted "
                                  "offsets and/or metadata for group %s: %s", n, OFFSETS_TOPIC,
                                  p, g, ErrorCode(error).name)
                self._append(tp, batch, 1, appended)
                total += len(removed)
        return total
