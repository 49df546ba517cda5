"""Writing a transaction's markers (Kafka 2.8's TransactionMarkerChannelManager and
TransactionMarkerRequestCompletionHandler).

Once PrepareCommit / PrepareAbort is in `__transaction_state`, the coordinator hands the
transaction here (`add_txn_markers_to_send`). Its partitions are grouped by their current
leader (`leader_for`, a lookup in the broker's metadata cache on the inter-broker listener) into
one queue per destination broker, keyed by the `__transaction_state` partition so that an
unloaded partition's markers can be dropped. A partition whose leader is known but not
reachable waits in the unknown-destination queue; one unknown to the metadata (deleted) is
removed from the transaction. A pump task drains the queues into WriteTxnMarkers (key 27)
requests, at most one in flight per broker, sent over a connection made by
security/connector.py (inter-broker TLS / SASL honoured).

Answers, per partition (the completion handler):
  NONE                                     the partition is done (removed from the metadata)
  NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR   retried (to the then current leader)
  INVALID_PRODUCER_EPOCH, PRODUCER_FENCED,
  TRANSACTION_COORDINATOR_FENCED           the transaction is dropped (a newer epoch owns it)
  UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION  the partition is removed
A lost connection or a timeout retries every marker of the request (after a back-off). Before
any of this, a transaction whose coordinator epoch is no longer the cached one, or whose
partition is not (or is being re-) loaded, is dropped: the new coordinator will finish it.

When a transaction has no partition left, CompleteCommit / CompleteAbort is appended; an append
that fails with COORDINATOR_NOT_AVAILABLE is retried at the next pump.

Memory is bounded by the transactions the coordinator owns: a transactional id has at most one
pending completion, and each of its partitions sits in at most one queue at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..common import TopicPartition
from ..protocol.codec import make, request_class
from ..security.connector import BrokerBlockingSender, ClientSecurity, Connector, open_connection
from .transaction_state import TransactionMetadata, TransactionResult, TxnTransitMetadata
from .transaction_state_manager import TransactionStateManager

log = logging.getLogger("odradek.coordinator.txn_markers")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1  # Kafka 2.8's inter-broker protocol sends v1

# (broker id, host, port) of a partition's leader on the inter-broker listener
Destination = tuple[int, str, int]
NO_NODE: Destination = (-1, "", -1)
# a partition's leader: None if the partition is unknown (deleted), NO_NODE if its leader is
# known but not available
LeaderLookup = Callable[[TopicPartition], Destination | None]

RETRIABLE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
})
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced,
                    ErrorCode.transaction_coordinator_fenced})
REMOVABLE = frozenset({ErrorCode.unsupported_for_message_format,
                       ErrorCode.unsupported_version})



@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class TxnIdAndMarkerEntry:
    transactional_id: str
    marker: TxnMarkerEntry


@dataclass(frozen=True, slots=True)
class PendingCompleteTxn:
    transactional_id: str
    coordinator_epoch: int
    txn_metadata: TransactionMetadata
    new_metadata: TxnTransitMetadata


@dataclass
class TxnMarkerQueue:
    """Kafka's TxnMarkerQueue: the markers for one destination, per `__transaction_state`
    partition."""

    destination: Destination
    markers_per_txn_partition: dict[int, deque[TxnIdAndMarkerEntry]] = field(
        default_factory=dict)

    def add_markers(self, txn_partition: int, entry: TxnIdAndMarkerEntry) -> None:
        self.markers_per_txn_partition.setdefault(txn_partition, deque()).append(entry)

    def remove_markers_for_txn_partition(self, txn_partition: int
                                         ) -> deque[TxnIdAndMarkerEntry] | None:
        return self.markers_per_txn_partition.pop(txn_partition, None)

    def drain(self) -> list[TxnIdAndMarkerEntry]:
        out: list[TxnIdAndMarkerEntry] = []
        for queue in self.markers_per_txn_partition.values():
            out.extend(queue)
            queue.clear()
        return out

    @property
    def total_num_markers(self) -> int:
        return sum(len(q) for q in self.markers_per_txn_partition.values())


def write_txn_markers_request(entries: Iterable[TxnIdAndMarkerEntry],
                              version: int = WRITE_TXN_MARKERS_VERSION) -> Any:
    cls = request_class(WRITE_TXN_MARKERS, version)
    m = sys.modules[cls.__module__]
    markers = []
    for e in entries:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(e.marker.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        markers.append(make(
            m.WritableTxnMarker, producer_id=e.marker.producer_id,
            producer_epoch=e.marker.producer_epoch,
            transaction_result=e.marker.result.is_commit,
            topics=tuple(make(m.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                         for t, ps in by_topic.items()),
            coordinator_epoch=e.marker.coordinator_epoch))
    return make(cls, markers=tuple(markers))


def errors_by_producer_id(response: Any) -> dict[int, dict[TopicPartition, int]]:
    """WriteTxnMarkersResponse.errorsByProducerId."""
    return {marker.producer_id: {TopicPartition(t.name, p.partition_index): p.error_code
                                 for t in marker.topics for p in t.partitions}
            for marker in response.markers}


class TransactionMarkerChannelManager:
    def __init__(self, broker_id: int, txn_state_manager: TransactionStateManager,
                 leader_for: LeaderLookup, *, security: ClientSecurity | None = None,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 connector: Connector = open_connection) -> None:
        self.broker_id = broker_id
        self.txn_state_manager = txn_state_manager
        self.leader_for = leader_for
        self.security = security
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.connector = connector
        self.markers_queue_per_broker: dict[int, TxnMarkerQueue] = {}
        self.markers_queue_for_unknown_broker = TxnMarkerQueue(NO_NODE)
        self.txn_log_append_retry_queue: deque[PendingCompleteTxn] = deque()
        self.transactions_with_pending_markers: dict[str, PendingCompleteTxn] = {}
        self._connections: dict[int, tuple[Destination, BrokerBlockingSender]] = {}
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._wakeup = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self.client_id = f"broker-{broker_id}-txn-marker-sender"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._pump = asyncio.create_task(self._run(), name=f"txn-marker-sender-{self.broker_id}")
        self.wakeup()  # one poll for whatever was queued before the start

    async def shutdown(self) -> None:
        tasks = [t for t in (self._pump, *self._in_flight.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._pump = None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._in_flight.clear()
        for _, conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self.markers_queue_per_broker.clear()
        self.transactions_with_pending_markers.clear()
        self.txn_log_append_retry_queue.clear()

    def wakeup(self) -> None:
        self._wakeup.set()

    def _retry_later(self) -> None:
        """Poll again after retry.backoff.ms: markers whose partition leader is not known yet
        and completions to append again wait for it (Kafka's send thread polls with that
        backoff while it has such work; with none it sleeps until woken)."""
        if self._retry is not None or self._pump is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the loop: nothing is polling yet
            return
        self._retry = loop.call_later(self.retry_backoff, self._retry_due)

    def _retry_due(self) -> None:
        self._retry = None
        self.wakeup()

    async def _run(self) -> None:
        # Woken by new markers, a finished send, or a retry due (`_retry_later`); an idle
        # channel does not wake at all (it polled every retry.backoff.ms before).
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                self.generate_requests()
            except Exception:
                log.exception("[Transaction Marker Channel Manager %d]: sending markers failed",
                              self.broker_id)
            await asyncio.sleep(0)  # a wakeup set meanwhile must not starve the loop

    # -- what is pending ------------------------------------------------------------------------
    @property
    def num_txns_with_pending_markers(self) -> int:
        return len(self.transactions_with_pending_markers)

    # -- the sender -----------------------------------------------------------------------------
    def retry_log_appends(self) -> None:
        retries = list(self.txn_log_append_retry_queue)
        self.txn_log_append_retry_queue.clear()
        for pending in retries:
            log.debug("Retry appending %s transaction log", pending)
            self._try_append_to_log(pending)

    def generate_requests(self) -> None:
        """One poll of Kafka's InterBrokerSendThread: retry completions, place the markers
        whose destination was unknown, and send one request to each broker that has markers
        and none in flight."""
        self.retry_log_appends()
        for e in self.markers_queue_for_unknown_broker.drain():
            m = e.marker
            self.add_txn_markers_to_broker_queue(e.transactional_id, m.producer_id,
                                                 m.producer_epoch, m.result,
                                                 m.coordinator_epoch, m.partitions)
        for broker_id, queue in self.markers_queue_per_broker.items():
            if broker_id in self._in_flight or queue.total_num_markers == 0:
                continue
            entries = queue.drain()
            self._in_flight[broker_id] = asyncio.create_task(
                self._send(broker_id, queue.destination, entries),
                name=f"txn-markers-{self.broker_id}-to-{broker_id}")

    async def _send(self, broker_id: int, destination: Destination,
                    entries: list[TxnIdAndMarkerEntry]) -> None:
        try:
            known = self._connections.get(broker_id)
            if known is None or known[0] != destination:
                if known is not None:
                    known[1].close()
                _, host, port = destination
                known = self._connections[broker_id] = (destination, BrokerBlockingSender(
                    lambda: (host, port), self.security, self.request_timeout_ms,
                    self.client_id, connector=self.connector, peer=f"broker {broker_id}"))
            conn = known[1]
            try:
                response = await conn.send(write_txn_markers_request(entries))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection, TLS, SASL, timeout: a disconnect
                log.info("Sending transaction markers to broker %d failed (%s); retrying",
                         broker_id, exc)
                await asyncio.sleep(self.retry_backoff)
                self.on_disconnected(entries)
            else:
                self.on_response(entries, errors_by_producer_id(response))
        finally:
            if self._in_flight.get(broker_id) is asyncio.current_task():
                del self._in_flight[broker_id]
            self.wakeup()

    # -- the completion handler -----------------------------------------------------------------
    def _current_epoch_or_drop(self, transactional_id: str, marker: TxnMarkerEntry) -> Any:
        """The cached metadata if the marker's coordinator epoch is still current; else the
        markers of the transaction are dropped and None is returned."""
        error, found = self.txn_state_manager.get_transaction_state(transactional_id)
        if error != ErrorCode.none or found is None:
            log.info("No longer the coordinator of %s (%s); cancel sending transaction markers "
                     "%s", transactional_id, ErrorCode(error).name, marker)
            self.remove_markers_for_txn_id(transactional_id)
            return None
        if found.coordinator_epoch != marker.coordinator_epoch:
            log.info("Transaction coordinator epoch for %s has changed from %d to %d; cancel "
                     "sending transaction markers %s", transactional_id,
                     marker.coordinator_epoch, found.coordinator_epoch, marker)
            self.remove_markers_for_txn_id(transactional_id)
            return None
        return found.transaction_metadata

    def on_disconnected(self, entries: Iterable[TxnIdAndMarkerEntry]) -> None:
        for e in entries:
            m = e.marker
            if self._current_epoch_or_drop(e.transactional_id, m) is not None:
                self.add_txn_markers_to_broker_queue(e.transactional_id, m.producer_id,
                                                     m.producer_epoch, m.result,
                                                     m.coordinator_epoch, m.partitions)

    def on_response(self, entries: Iterable[TxnIdAndMarkerEntry],
                    errors: dict[int, dict[TopicPartition, int]]) -> None:
        for e in entries:
            m = e.marker
            tid = e.transactional_id
            metadata = self._current_epoch_or_drop(tid, m)
            if metadata is None:
                continue
            partition_errors = errors.get(m.producer_id)
            if partition_errors is None:
                log.error("WriteTxnMarkers response has no errors for producer id %d; "
                          "retrying the markers of %s", m.producer_id, tid)
                partition_errors = {tp: ErrorCode.unknown_server_error for tp in m.partitions}
            retry: set[TopicPartition] = set()
            abort_sending = False
            for tp in m.partitions:
                error = partition_errors.get(tp, ErrorCode.unknown_server_error)
                if error == ErrorCode.none:
                    metadata.remove_partition(tp)
                elif error in RETRIABLE:
                    log.info("Sending %s's transaction marker for %s failed with %s; retrying",
                             tid, tp, ErrorCode(error).name)
                    retry.add(tp)
                elif error in FENCED:
                    log.info("Sending %s's transaction marker for %s has permanently failed "
                             "with %s; cancel sending any more markers %s", tid, tp,
                             ErrorCode(error).name, m)
                    self.remove_markers_for_txn_id(tid)
                    abort_sending = True
                    break
                elif error in REMOVABLE:
                    log.info("Sending %s's transaction marker for %s failed with %s; the "
                             "partition no longer waits for it", tid, tp, ErrorCode(error).name)
                    metadata.remove_partition(tp)
                else:  # Kafka: an IllegalStateException; here retried, so nothing wedges
                    log.error("Unexpected error %s while sending %s's transaction marker for "
                              "%s; retrying", _name(error), tid, tp)
                    retry.add(tp)
            if abort_sending:
                continue
            if retry:
                self.add_txn_markers_to_broker_queue(tid, m.producer_id, m.producer_epoch,
                                                     m.result, m.coordinator_epoch,
                                                     frozenset(retry))
            else:
                self.maybe_write_txn_completion(tid)

    # -- adding and removing markers ------------------------------------------------------------
    def add_txn_markers_to_send(self, coordinator_epoch: int, result: TransactionResult,
                                txn_metadata: TransactionMetadata,
                                new_metadata: TxnTransitMetadata) -> None:
        """Send the markers of a prepared transaction; once all are written, append
        `new_metadata` (CompleteCommit / CompleteAbort)."""
        tid = txn_metadata.transactional_id
        self.transactions_with_pending_markers[tid] = PendingCompleteTxn(
            tid, coordinator_epoch, txn_metadata, new_metadata)
        self.add_txn_markers_to_broker_queue(tid, txn_metadata.producer_id,
                                             txn_metadata.producer_epoch, result,
                                             coordinator_epoch,
                                             frozenset(txn_metadata.topic_partitions))
        self.maybe_write_txn_completion(tid)

    def add_txn_markers_to_broker_queue(self, transactional_id: str, producer_id: int,
                                        producer_epoch: int, result: TransactionResult,
                                        coordinator_epoch: int,
                                        partitions: frozenset[TopicPartition]) -> None:
        txn_partition = self.txn_state_manager.partition_for(transactional_id)
        by_destination: dict[Destination | None, set[TopicPartition]] = {}
        for tp in partitions:
            by_destination.setdefault(self.leader_for(tp), set()).add(tp)
        sendable = False
        for destination, tps in by_destination.items():
            if destination is not None:
                entry = TxnIdAndMarkerEntry(transactional_id, TxnMarkerEntry(
                    producer_id, producer_epoch, coordinator_epoch, result, frozenset(tps)))
                if destination[0] < 0:  # looked up again after retry.backoff.ms
                    self.markers_queue_for_unknown_broker.add_markers(txn_partition, entry)
                    self._retry_later()
                else:
                    sendable = True
                    queue = self.markers_queue_per_broker.get(destination[0])
                    if queue is None:
                        queue = self.markers_queue_per_broker[destination[0]] = \
                            TxnMarkerQueue(destination)
                    queue.destination = destination
                    queue.add_markers(txn_partition, entry)
                continue
            # the partition is unknown: most likely deleted, so no marker is needed
            error, found = self.txn_state_manager.get_transaction_state(transactional_id)
            if error != ErrorCode.none or found is None:
                log.info("Encountered %s trying to fetch transaction metadata for %s with "
                         "coordinator epoch %d; cancel sending markers", _name(error),
                         transactional_id, coordinator_epoch)
                self.transactions_with_pending_markers.pop(transactional_id, None)
            elif found.coordinator_epoch != coordinator_epoch:
                log.info("The cached metadata of %s has changed (coordinator epoch %d, was %d); "
                         "cancel sending markers", transactional_id, found.coordinator_epoch,
                         coordinator_epoch)
                self.transactions_with_pending_markers.pop(transactional_id, None)
            else:
                log.info("Couldn't find leader endpoint for partitions %s while trying to send "
                         "transaction markers for %s; they are likely deleted and skipped",
                         sorted(tps), transactional_id)
                for tp in tps:
                    found.transaction_metadata.remove_partition(tp)
                self.maybe_write_txn_completion(transactional_id)
        if sendable:
            self.wakeup()

    def maybe_write_txn_completion(self, transactional_id: str) -> None:
        pending = self.transactions_with_pending_markers.get(transactional_id)
        if pending is None or pending.txn_metadata.topic_partitions:
            return
        del self.transactions_with_pending_markers[transactional_id]
        self._write_txn_completion(pending)

    def _write_txn_completion(self, pending: PendingCompleteTxn) -> None:
        tid = pending.transactional_id
        error, found = self.txn_state_manager.get_transaction_state(tid)
        if error != ErrorCode.none or found is None:
            log.info("No longer the coordinator of %s (%s) with coordinator epoch %d; cancel "
                     "appending %s to the transaction log", tid, _name(error),
                     pending.coordinator_epoch, pending.new_metadata)
        elif found.coordinator_epoch != pending.coordinator_epoch:
            log.info("The cached metadata of %s has changed after sending its markers with "
                     "coordinator epoch %d; not appending %s", tid, pending.coordinator_epoch,
                     pending.new_metadata)
        else:
            self._try_append_to_log(pending)

    def _try_append_to_log(self, pending: PendingCompleteTxn) -> None:
        def appended(error: int) -> None:
            if error == ErrorCode.none:
                log.debug("Completed transaction for %s with coordinator epoch %d, final state "
                          "%s", pending.transactional_id, pending.coordinator_epoch,
                          pending.txn_metadata.state)
            elif error == ErrorCode.coordinator_not_available:
                log.info("Not available to append %s; retry appending", pending)
                self.txn_log_append_retry_queue.append(pending)
                self._retry_later()
            elif error in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
                log.info("Skip writing %s to the transaction log: %s (the new coordinator "
                         "completes it)", pending.transactional_id, _name(error))
            else:  # Kafka: an IllegalStateException
                log.error("Unexpected error %s while appending to transaction log for %s",
                          _name(error), pending.transactional_id)

        self.txn_state_manager.append_transaction_to_log(
            pending.transactional_id, pending.coordinator_epoch, pending.new_metadata, appended,
            retry_on_error=lambda e: e == ErrorCode.coordinator_not_available)

    def remove_markers_for_txn_partition(self, txn_partition: int) -> None:
        """The `__transaction_state` partition was unloaded (or is being loaded again)."""
        for queue in (self.markers_queue_for_unknown_broker,
                      *self.markers_queue_per_broker.values()):
            removed = queue.remove_markers_for_txn_partition(txn_partition)
            for entry in removed or ():
                self.remove_markers_for_txn_id(entry.transactional_id)
        # completions waiting for a retry or for markers in flight are dropped too
        for tid in [t for t in self.transactions_with_pending_markers
                    if self.txn_state_manager.partition_for(t) == txn_partition]:
            self.remove_markers_for_txn_id(tid)
        retry = [p for p in self.txn_log_append_retry_queue
                 if self.txn_state_manager.partition_for(p.transactional_id) != txn_partition]
        self.txn_log_append_retry_queue = deque(retry)

    def remove_markers_for_txn_id(self, transactional_id: str) -> None:
        self.transactions_with_pending_markers.pop(transactional_id, None)


def _name(error: int) -> str:
    try:
        return ErrorCode(error).name
    except ValueError:
        return str(error)

