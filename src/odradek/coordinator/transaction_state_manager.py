"""Transaction metadata in `__transaction_state` (Kafka 2.8's TransactionStateManager).

* The cache: per `__transaction_state` partition this broker leads, the coordinator epoch (the
  partition's leader epoch when it was loaded) and the metadata of its transactional ids. A
  partition being loaded answers COORDINATOR_LOAD_IN_PROGRESS; any other partition not in the
  cache NOT_COORDINATOR (`get_transaction_state`).
* Loads: when this broker becomes leader of a partition (coordinator epoch = leader epoch), its
  log is read from start to end, one `transaction.state.log.load.buffer.size` chunk at a time,
  the last value of each key winning (a tombstone removes it). Loads run one at a time on a
  worker task, in the order leadership changed, and stop when leadership moves. Once loaded,
  the transactions found in PrepareCommit / PrepareAbort are handed to `send_markers` (the
  marker channel), which writes their markers and then CompleteCommit / CompleteAbort.
* Unloads (leadership moved, StopReplica) drop the partition's cache at once.
* Writes: a `TxnTransitMetadata` is one record (key, value) appended with acks=-1 and origin
  COORDINATOR; only once it is replicated does the cached metadata move
  (`complete_transition_to`), and only if the coordinator epoch did not change meanwhile.
  Append errors map to coordinator errors as in Kafka's appendTransactionToLog.
* Expiration: transactional ids idle for `transactional.id.expiration.ms` in Empty or Complete*
  get tombstones (`remove_expired_transactional_ids`); ongoing transactions past their timeout
  are listed by `timed_out_transactions` for the coordinator to abort.

Single-threaded (asyncio): Kafka's locks become "no await between a check and its use"; a
write's completion re-checks the coordinator epoch, exactly where Kafka re-reads the cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..common import TopicPartition
from ..protocol import records as rb
from ..storage.append_origin import AppendOrigin
from . import transaction_log
from .replica_access import ReplicaAccess
from .transaction_state import (
    DEFAULT_NUM_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    Dead,
    Ongoing,
    PrepareAbort,
    PrepareCommit,
    TransactionMetadata,
    TransactionResult,
    TxnTransitMetadata,
    partition_for,
)

log = logging.getLogger("odradek.coordinator.transaction")

# TransactionLog.EnforcedRequiredAcks
ENFORCED_REQUIRED_ACKS = -1
# Kafka's default max.message.bytes: a tombstone batch stays below it
DEFAULT_MAX_BATCH_BYTES = 1048588

# f(coordinator epoch, result, metadata, target): the marker channel's addTxnMarkersToSend
SendTxnMarkers = Callable[[int, TransactionResult, TransactionMetadata, TxnTransitMetadata],
                          None]


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Kafka's TransactionConfig, from the broker's transaction.* keys."""

    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    replication_factor: int = 3
    segment_bytes: int = 100 * 1024 * 1024
    load_buffer_size: int = 5 * 1024 * 1024
    min_insync_replicas: int = 2
    abort_timed_out_transactions_interval_ms: int = 10_000
    remove_expired_transactional_ids_interval_ms: int = 3_600_000
    request_timeout_ms: int = 30_000

    @classmethod
    def from_config(cls, config: Any) -> TransactionConfig:
        return cls(
            transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
            transaction_max_timeout_ms=config["transaction.max.timeout.ms"],
            num_partitions=config["transaction.state.log.num.partitions"],
            replication_factor=config["transaction.state.log.replication.factor"],
            segment_bytes=config["transaction.state.log.segment.bytes"],
            load_buffer_size=config["transaction.state.log.load.buffer.size"],
            min_insync_replicas=config["transaction.state.log.min.isr"],
            abort_timed_out_transactions_interval_ms=config[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_transactional_ids_interval_ms=config[
                "transaction.remove.expired.transaction.cleanup.interval.ms"],
            request_timeout_ms=config["request.timeout.ms"])

    def topic_configs(self, replication_factor: int | None = None) -> dict[str, str]:
        """Kafka's transactionTopicConfigs: no unclean election, uncompressed, compacted,
        `transaction.state.log.min.isr`, `transaction.state.log.segment.bytes`. Given the
        replication factor actually used (capped by a small cluster's live brokers), the
        min.insync.replicas is capped by it, so that a one-broker cluster can write."""
        min_isr = self.min_insync_replicas
        if replication_factor is not None:
            min_isr = min(min_isr, replication_factor)
        return {"unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
                "cleanup.policy": "compact",
                "min.insync.replicas": str(min_isr),
                "segment.bytes": str(self.segment_bytes)}


@dataclass(slots=True)
class TxnMetadataCacheEntry:
    coordinator_epoch: int
    metadata_per_transactional_id: dict[str, TransactionMetadata]


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    transaction_metadata: TransactionMetadata


@dataclass(frozen=True, slots=True)
class TransactionalIdAndProducerIdEpoch:
    transactional_id: str
    producer_id: int
    producer_epoch: int


# (error, metadata): error NONE with None = no such transactional id (Kafka's Right(None))
TxnStateResult = tuple[int, CoordinatorEpochAndTxnMetadata | None]


def map_append_error(error: int) -> int:
    """A failed append to `__transaction_state` as the coordinator reports it
    (TransactionStateManager.appendTransactionToLog)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return error


def should_expire(metadata: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's shouldExpire: idle in a state that allows it for at least the expiration."""
    return (metadata.state.is_expiration_allowed
            and metadata.txn_last_update_timestamp <= now_ms - expiration_ms)


def is_timed_out(metadata: TransactionMetadata, now_ms: int) -> bool:
    """An ongoing transaction (no transition pending) older than its timeout."""
    return (metadata.pending_state is None and metadata.state is Ongoing
            and metadata.txn_start_timestamp + metadata.txn_timeout_ms < now_ms)


class TransactionStateManager:
    def __init__(self, broker_id: int, replica_manager: ReplicaAccess, config: TransactionConfig,
                 clock: Callable[[], int], *,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.config = config
        self.clock = clock
        self.max_batch_bytes = max_batch_bytes
        # (partition, coordinator epoch) being loaded
        self.loading_partitions: set[tuple[int, int]] = set()
        self.transaction_metadata_cache: dict[int, TxnMetadataCacheEntry] = {}
        self._partition_count: Callable[[], int] = lambda: config.num_partitions
        self.transaction_topic_partition_count = config.num_partitions
        self.shutting_down = False
        self._jobs: asyncio.Queue[Callable[[], Awaitable[None]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        # Awaited between two chunks of a load (tests may slow a load down).
        self.load_pause: Callable[[], Awaitable[None]] = lambda: asyncio.sleep(0)

    # -- lifecycle ------------------------------------------------------------------------------
    def startup(self, partition_count: Callable[[], int]) -> None:
        self._partition_count = partition_count
        self.transaction_topic_partition_count = partition_count()
        self.shutting_down = False
        self._jobs = asyncio.Queue()
        self._worker = asyncio.create_task(self._run_jobs(),
                                           name=f"transaction-state-loader-{self.broker_id}")

    def shutdown(self) -> None:
        self.shutting_down = True
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
        self.loading_partitions.clear()
        self.transaction_metadata_cache.clear()
        log.info("[Transaction State Manager %d]: Shutdown complete", self.broker_id)

    async def _run_jobs(self) -> None:
        assert self._jobs is not None
        while True:
            job = await self._jobs.get()
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("[Transaction State Manager %d]: transaction log load failed",
                              self.broker_id)

    # -- lookups --------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.transaction_topic_partition_count)

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        return 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms

    def is_loading(self, partition: int) -> bool:
        return any(p == partition for p, _ in self.loading_partitions)

    def get_transaction_state(self, transactional_id: str) -> TxnStateResult:
        return self._get_and_maybe_add(transactional_id, None)

    def put_transaction_state_if_not_exists(self, metadata: TransactionMetadata
                                            ) -> TxnStateResult:
        return self._get_and_maybe_add(metadata.transactional_id, metadata)

    def _get_and_maybe_add(self, transactional_id: str,
                           created: TransactionMetadata | None) -> TxnStateResult:
        partition = self.partition_for(transactional_id)
        if self.is_loading(partition):
            return ErrorCode.coordinator_load_in_progress, None
        entry = self.transaction_metadata_cache.get(partition)
        if entry is None:
            return ErrorCode.not_coordinator, None
        metadata = entry.metadata_per_transactional_id.get(transactional_id)
        if metadata is None and created is not None:
            metadata = entry.metadata_per_transactional_id.setdefault(transactional_id, created)
        if metadata is None:
            return ErrorCode.none, None
        return ErrorCode.none, CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)

    def timed_out_transactions(self, now_ms: int | None = None
                               ) -> list[TransactionalIdAndProducerIdEpoch]:
        now = self.clock() if now_ms is None else now_ms
        return [TransactionalIdAndProducerIdEpoch(tid, m.producer_id, m.producer_epoch)
                for entry in self.transaction_metadata_cache.values()
                for tid, m in entry.metadata_per_transactional_id.items()
                if is_timed_out(m, now)]

    def all_metadata(self) -> list[TransactionMetadata]:
        return [m for entry in self.transaction_metadata_cache.values()
                for m in entry.metadata_per_transactional_id.values()]

    # -- loading and unloading ------------------------------------------------------------------
    def load_transactions_for_partition(self, partition: int, coordinator_epoch: int,
                                        send_markers: SendTxnMarkers) -> None:
        """Mark the partition loading (requests answer COORDINATOR_LOAD_IN_PROGRESS) and
        schedule the load."""
        log.info("[Transaction State Manager %d]: Scheduling loading of transaction metadata "
                 "from %s-%d at epoch %d", self.broker_id, TRANSACTION_STATE_TOPIC, partition,
                 coordinator_epoch)
        self.loading_partitions.add((partition, coordinator_epoch))
        if self._jobs is None:
            raise RuntimeError("the transaction state manager is not started")
        self._jobs.put_nowait(lambda: self._load(partition, coordinator_epoch, send_markers))

    def remove_transactions_for_partition(self, partition: int,
                                          coordinator_epoch: int | None = None) -> None:
        """Become-follower (with the new leader epoch) or StopReplica (None): drop the cache
        at once. Every load of the partition stops, whatever its epoch (Kafka 2.8 removes only
        a load at the given epoch, i.e. none when the epoch moved on, and could then cache a
        partition it no longer leads; later Kafka versions remove them all, as here)."""
        self.loading_partitions = {(p, e) for p, e in self.loading_partitions
                                   if p != partition}
        entry = self.transaction_metadata_cache.pop(partition, None)
        log.info("[Transaction State Manager %d]: Unloaded transaction metadata of %s-%d "
                 "(coordinator epoch %s): %d transactional ids", self.broker_id,
                 TRANSACTION_STATE_TOPIC, partition, coordinator_epoch,
                 0 if entry is None else len(entry.metadata_per_transactional_id))

    def _still_loading(self, partition: int, epoch: int) -> bool:
        return (partition, epoch) in self.loading_partitions and not self.shutting_down

    async def _load(self, partition: int, epoch: int, send_markers: SendTxnMarkers) -> None:
        if not self._still_loading(partition, epoch):
            return
        start = self.clock()
        count = self._partition_count()
        if count != self.transaction_topic_partition_count:
            log.error("Transaction topic number of partitions has changed from %d to %d",
                      self.transaction_topic_partition_count, count)
        try:
            loaded = await self._read_partition(partition, epoch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Error loading transactions from transaction log %s-%d",
                          TRANSACTION_STATE_TOPIC, partition)
            loaded = {}
        if not self._still_loading(partition, epoch):
            return
        previous = self.transaction_metadata_cache.get(partition)
        if previous is not None:
            log.warning("Unloaded transaction metadata of %s-%d (epoch %d) as part of loading "
                        "it at epoch %d", TRANSACTION_STATE_TOPIC, partition,
                        previous.coordinator_epoch, epoch)
        self.transaction_metadata_cache[partition] = TxnMetadataCacheEntry(epoch, loaded)
        now = self.clock()
        pending: list[tuple[TransactionResult, TransactionMetadata, TxnTransitMetadata]] = []
        for metadata in loaded.values():
            if metadata.state is PrepareAbort:
                pending.append((TransactionResult.ABORT, metadata, metadata.prepare_complete(now)))
            elif metadata.state is PrepareCommit:
                pending.append((TransactionResult.COMMIT, metadata,
                                metadata.prepare_complete(now)))
        # no longer loading first: completing the transactions must not see LOAD_IN_PROGRESS
        self.loading_partitions.discard((partition, epoch))
        log.info("[Transaction State Manager %d]: Finished loading %d transaction metadata from "
                 "%s-%d in %d milliseconds for coordinator epoch %d; %d to complete",
                 self.broker_id, len(loaded), TRANSACTION_STATE_TOPIC, partition,
                 self.clock() - start, epoch, len(pending))
        for result, metadata, transit in pending:
            send_markers(epoch, result, metadata, transit)

    async def _read_partition(self, partition: int, epoch: int
                              ) -> dict[str, TransactionMetadata]:
        loaded: dict[str, TransactionMetadata] = {}
        p = self.replica_manager.partitions.get(TopicPartition(TRANSACTION_STATE_TOPIC,
                                                               partition))
        if p is None:
            log.warning("Attempted to load transaction metadata from %s-%d, but found no log",
                        TRANSACTION_STATE_TOPIC, partition)
            return loaded
        offset = p.log_start_offset
        while self._still_loading(partition, epoch):
            if not (p.is_leader and p.leader_epoch == epoch):
                log.info("Stopped loading %s-%d: no longer its leader in epoch %d",
                         TRANSACTION_STATE_TOPIC, partition, epoch)
                break
            end = p.log_end_offset
            if offset >= end:
                break
            data = p.log.read(offset, self.config.load_buffer_size, max_offset=end,
                              min_one_message=True)
            buf = data.read_bytes()
            if not buf:
                break
            for header in rb.iter_headers(buf):
                if not header.is_control:
                    batch = memoryview(buf)[header.position:header.position + header.size]
                    for record in rb.decode_records(batch):
                        if record.key is None:
                            raise ValueError("Transaction state log's key should not be null")
                        key = transaction_log.read_txn_record_key(record.key)
                        metadata = transaction_log.read_txn_record_value(key.transactional_id,
                                                                         record.value)
                        if metadata is None:
                            loaded.pop(key.transactional_id, None)
                        else:
                            loaded[key.transactional_id] = metadata
                offset = header.next_offset
            await self.load_pause()
        return loaded

    # -- writes ---------------------------------------------------------------------------------
    def _append(self, tp: TopicPartition, batch: bytes, timeout_ms: int,
                callback: Callable[[int], None]) -> None:
        """Append one batch with acks=-1; callback(error) once replicated or failed."""
        result = self.replica_manager.append_records(
            ENFORCED_REQUIRED_ACKS, timeout_ms, {tp: batch}, origin=AppendOrigin.COORDINATOR)
        if isinstance(result, dict):
            callback(result[tp].error)
            return

        def done(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled():
                callback(ErrorCode.request_timed_out)
                return
            exc = fut.exception()
            if exc is not None:
                log.error("Append to %s failed", tp, exc_info=exc)
                callback(ErrorCode.unknown_server_error)
                return
            callback(fut.result()[tp].error)

        result.add_done_callback(done)

    def append_transaction_to_log(self, transactional_id: str, coordinator_epoch: int,
                                  new_metadata: TxnTransitMetadata,
                                  callback: Callable[[int], None],
                                  retry_on_error: Callable[[int], bool] = lambda _e: False
                                  ) -> None:
        """Write `new_metadata`; once it is replicated, complete the cached metadata's
        transition (if the coordinator epoch is unchanged) and call back with the error the
        coordinator answers. A failure clears the pending state unless `retry_on_error`."""
        key = transaction_log.key_to_bytes(transactional_id)
        value = transaction_log.value_to_bytes(new_metadata)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
        batch = rb.build_batch([(key, value)], timestamp_ms=self.clock())

        def update_cache(status: int) -> None:
            response = ErrorCode.none if status == ErrorCode.none else map_append_error(status)
            if response == ErrorCode.none:
                error, found = self.get_transaction_state(transactional_id)
                if error != ErrorCode.none:
                    log.info("Accessing the cached transaction metadata for %s returns %s; "
                             "aborting the transition to %s", transactional_id,
                             ErrorCode(error).name, new_metadata)
                    response = error
                elif found is None:
                    response = ErrorCode.not_coordinator
                elif found.coordinator_epoch != coordinator_epoch:
                    log.info("The cached coordinator epoch for %s has changed to %d after "
                             "appending its new metadata at epoch %d: NOT_COORDINATOR",
                             transactional_id, found.coordinator_epoch, coordinator_epoch)
                    response = ErrorCode.not_coordinator
                else:
                    found.transaction_metadata.complete_transition_to(new_metadata)
            else:
                log.debug("Appending %s's new metadata %s failed due to %s", transactional_id,
                          new_metadata, ErrorCode(status).name)
                error, found = self.get_transaction_state(transactional_id)
                if (error == ErrorCode.none and found is not None
                        and found.coordinator_epoch == coordinator_epoch
                        and not retry_on_error(response)):
                    found.transaction_metadata.pending_state = None
            callback(response)

        error, found = self.get_transaction_state(transactional_id)
        if error != ErrorCode.none:
            callback(error)
        elif found is None or found.coordinator_epoch != coordinator_epoch:
            callback(ErrorCode.not_coordinator)
        else:
            self._append(tp, batch, new_metadata.txn_timeout_ms, update_cache)

    def append(self, transactional_id: str, coordinator_epoch: int,
               new_metadata: TxnTransitMetadata) -> asyncio.Future[int]:
        """`append_transaction_to_log` as a future of the error."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def done(error: int) -> None:
            if not future.done():
                future.set_result(error)

        self.append_transaction_to_log(transactional_id, coordinator_epoch, new_metadata, done)
        return future

    # -- expiration -----------------------------------------------------------------------------
    def remove_expired_transactional_ids(self, now_ms: int | None = None) -> int:
        """Write tombstones for the transactional ids idle too long (Empty, Complete*) and drop
        them from the cache once the tombstones are replicated. Returns how many were
        prepared."""
        now = self.clock() if now_ms is None else now_ms
        total = 0
        for partition, entry in list(self.transaction_metadata_cache.items()):
            tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
            if tp not in self.replica_manager.partitions:
                log.warning("Transaction expiration for partition %s failed because the "
                            "partition is not local", tp)
                continue
            expired: list[tuple[str, TxnTransitMetadata]] = []
            size = 0
            for tid, metadata in list(entry.metadata_per_transactional_id.items()):
                if metadata.pending_state is not None or not should_expire(
                        metadata, now, self.config.transactional_id_expiration_ms):
                    continue
                record_size = len(tid.encode()) + 32
                if expired and size + record_size > self.max_batch_bytes:
                    self._write_tombstones(tp, entry.coordinator_epoch, expired, now)
                    expired, size = [], 0
                expired.append((tid, metadata.prepare_dead()))
                size += record_size
                total += 1
            if expired:
                self._write_tombstones(tp, entry.coordinator_epoch, expired, now)
        return total

    def _write_tombstones(self, tp: TopicPartition, coordinator_epoch: int,
                          expired: list[tuple[str, TxnTransitMetadata]], now: int) -> None:
        batch = rb.build_batch([(transaction_log.key_to_bytes(tid), None) for tid, _ in expired],
                               timestamp_ms=now)

        def remove_from_cache(error: int) -> None:
            entry = self.transaction_metadata_cache.get(tp.partition)
            if entry is None:
                return
            for tid, transit in expired:
                metadata = entry.metadata_per_transactional_id.get(tid)
                if metadata is None:
                    continue
                if (entry.coordinator_epoch == coordinator_epoch and metadata.pending_state is Dead
                        and metadata.producer_epoch == transit.producer_epoch
                        and error == ErrorCode.none):
                    del entry.metadata_per_transactional_id[tid]
                else:
                    log.warning("Failed to remove expired transactionalId %s from cache: "
                                "tombstone append error %s, pending state %s", tid,
                                ErrorCode(error).name, metadata.pending_state)
                    if metadata.pending_state is Dead:
                        metadata.pending_state = None

        self._append(tp, batch, self.config.request_timeout_ms, remove_from_cache)
