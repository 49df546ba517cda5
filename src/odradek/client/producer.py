"""The producer (S-7.1): the facade that wires the record accumulator, the sender task, the
idempotent producer's bookkeeping and the transaction manager, as Kafka's KafkaProducer does.

`accumulator.RecordAccumulator` (Kafka's RecordAccumulator) holds the records in batches per
partition: `batch.size`, `linger.ms`, `buffer.memory` and `max.block.ms`. `sender.Sender`
(Kafka's Sender) sends the ready batches, one Produce request per leader broker with at most
one batch per partition and at most `max.request.size` bytes, at most
`max.in.flight.requests.per.connection` requests outstanding per broker, and retries in
sequence order.

Idempotence (on by default, as in Kafka 3+; `idempotence.IdempotenceState`): the producer gets a
producer id and epoch (InitProducerId) and numbers each partition's batches with a sequence, so
a batch the broker already wrote but whose answer was lost is recognised as a duplicate when
retried.

Transactions (KIP-98, with `transactional.id`; confluent-kafka's method names): the producer id
and epoch come from init_transactions() (the transaction coordinator, found with FindCoordinator
key type 1), not from the idempotent path. Records may only be sent between begin_transaction()
and commit_transaction() / abort_transaction(); each partition joins the transaction
(AddPartitionsToTxn) before its first batch is sent, batches carry the transactional bit and
Produce the transactional id. commit_transaction() delivers everything first, then EndTxn;
abort_transaction() fails what was not sent yet. The state machine and the error classes
(abortable vs fatal) are `transaction_manager`'s, the coordinator requests `txn_requests`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..common.clock import now_ms
from ..protocol.compression import Codec
from .accumulator import RecordAccumulator
from .cluster_metadata import KafkaClient
from .config import PRODUCER, acks_value, build_config, to_bytes
from .delivery import DeliveryCallback
from .errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    TransactionAbortedError,
)
from .idempotence import IdempotenceState, idempotence_enabled
from .partitioner import Partitioner
from .producer_batch import BATCH_OVERHEAD, PendingRecord
from .sender import Sender
from .transaction_manager import TransactionManager, TxnState
from .txn_requests import TransactionalRequests, offsets_of
from .types import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata

log = logging.getLogger("odradek.client.producer")

RECORD_OVERHEAD = 21  # varint length + attributes + deltas + key/value/header counts, at most
Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]


class AsyncProducer:
    """The asyncio producer.

        async with AsyncProducer({"bootstrap.servers": "localhost:9092"}) as p:
            fut = await p.send("topic", b"value", key=b"key")
            metadata = await fut
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        cfg = build_config(PRODUCER, config, kwargs)
        self.config = cfg
        self.acks = acks_value(cfg["acks"])
        self.batch_size = int(cfg["batch.size"])
        self.linger = int(cfg["linger.ms"]) / 1000
        self.max_request_size = int(cfg["max.request.size"])
        self.codec = Codec.from_name(str(cfg["compression.type"]))
        self.retries = int(cfg["retries"])
        self.max_in_flight = int(cfg["max.in.flight.requests.per.connection"])
        self.delivery_timeout = int(cfg["delivery.timeout.ms"]) / 1000
        self.max_block = int(cfg["max.block.ms"]) / 1000
        self.buffer_memory = int(cfg["buffer.memory"])
        self.request_timeout_ms = int(cfg["request.timeout.ms"])
        self.retry_backoff = int(cfg["retry.backoff.ms"]) / 1000
        self.key_serializer = cfg.get("key.serializer") or to_bytes
        self.value_serializer = cfg.get("value.serializer") or to_bytes
        self.transactional_id: str | None = cfg.get("transactional.id") or None
        enabled = idempotence_enabled(cfg, self.acks, self.max_in_flight, self.retries,
                                      self.transactional_id)
        self.partitioner = Partitioner(cfg["partitioner"], self.batch_size)
        self.client = KafkaClient(cfg)
        # The transactional producer (KIP-98): its state, and its coordinator requests (one
        # at a time, under _txn_lock); its producer id comes from init_transactions().
        self.txn: TransactionManager | None = None
        self._txn_requests: TransactionalRequests | None = None
        if self.transactional_id is not None:
            self.txn = TransactionManager(self.transactional_id,
                                          int(cfg["transaction.timeout.ms"]))
            self._txn_requests = TransactionalRequests(
                self.client, self.txn, self.retry_backoff, self.request_timeout_ms / 1000)
        self._txn_lock: asyncio.Lock | None = None
        self.idempotence = IdempotenceState(enabled, self.txn is not None,
                                            "enable.idempotence" in cfg["_explicit"])
        self.accumulator = RecordAccumulator(
            self.client, self.partitioner, self.idempotence, self.txn, self._wake_sender,
            batch_size=self.batch_size, linger=self.linger,
            delivery_timeout=self.delivery_timeout, max_block=self.max_block,
            buffer_memory=self.buffer_memory, retry_backoff=self.retry_backoff)
        self.sender = Sender(
            self.client, self.accumulator, self.idempotence, self.txn, self._txn_requests,
            acks=self.acks, retries=self.retries, max_in_flight=self.max_in_flight,
            max_request_size=self.max_request_size, request_timeout_ms=self.request_timeout_ms,
            retry_backoff=self.retry_backoff, delivery_timeout=self.delivery_timeout,
            codec=self.codec, transactional_id=self.transactional_id)
        self.loop: asyncio.AbstractEventLoop | None = None

    def _wake_sender(self) -> None:
        self.sender.wake()

    @property
    def idempotent(self) -> bool:
        """Whether batches carry a producer id and sequences (off when the broker cannot)."""
        return self.idempotence.enabled

    @property
    def producer_id(self) -> int:
        """The producer id of the batches sent from now on (-1: none yet)."""
        return self.idempotence.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.idempotence.producer_epoch

    @property
    def _need_pid(self) -> bool:
        """Whether the sender waits for a new producer id (InitProducerId) before sending."""
        return self.idempotence.need_pid

    @property
    def closed(self) -> bool:
        """Whether close() has begun."""
        return self.accumulator.closed

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> AsyncProducer:
        self.loop = asyncio.get_running_loop()
        self.accumulator.start(self.loop)
        self._txn_lock = asyncio.Lock()
        await self.client.start()
        self.sender.start(self.loop, self._txn_lock)
        return self

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Send everything buffered (waiting at most `timeout` seconds), then stop."""
        if self.accumulator.closed:
            return
        try:
            await self.flush(timeout)
        finally:
            self.accumulator.close()
            await self.sender.close(timeout)
            self.accumulator.abort_all(KafkaError("producer closed before the record was sent"))
            await self.client.close()

    # -- sending ---------------------------------------------------------------------------------
    def _make_record(self, topic: str, value: Any, key: Any, partition: int | None,
                     timestamp_ms: int | None, headers: Headers | None) -> PendingRecord:
        if self.accumulator.closed:
            raise KafkaError("the producer is closed")
        if self.sender.fatal is not None:
            raise self.sender.fatal
        if self.txn is not None:
            self.txn.check_can_send(f"partition {topic}-{partition}" if partition is not None
                                    else f"a record of topic {topic}")
        # bytes (the common case) need no serializer call
        k = key if (key is None or type(key) is bytes) and self.key_serializer is to_bytes \
            else self.key_serializer(key)
        v = value if type(value) is bytes and self.value_serializer is to_bytes \
            else self.value_serializer(value)
        size = RECORD_OVERHEAD + (len(k) if k else 0) + (len(v) if v else 0)
        hdrs: list[tuple[str, bytes | None]] = []
        if headers:
            items = headers.items() if isinstance(headers, Mapping) else headers
            hdrs = [(str(hk), to_bytes(hv)) for hk, hv in items]
            size += sum(len(hk.encode()) + (len(hv) if hv else 0) + 10 for hk, hv in hdrs)
        if size + BATCH_OVERHEAD > self.max_request_size:
            raise RecordTooLargeError(
                f"the record is {size + BATCH_OVERHEAD} bytes when serialized, larger than "
                f"max.request.size ({self.max_request_size})")
        if size > self.buffer_memory:
            raise RecordTooLargeError(f"the record is {size} bytes, larger than buffer.memory")
        ts = now_ms() if timestamp_ms is None else int(timestamp_ms)
        return PendingRecord(topic, partition, k, v, hdrs, ts, size)

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Headers | None = None,
                   on_delivery: DeliveryCallback | None = None) -> asyncio.Future[RecordMetadata]:
        """Buffer one record; returns the future of its delivery. Waits (up to max.block.ms)
        while the topic's metadata is unknown or buffer.memory is full; raises then."""
        rec = self._make_record(topic, value, key, partition, timestamp_ms, headers)
        fut = self.enqueue(rec, on_delivery)
        if not rec.appended:
            await self.accumulator.wait_appended(fut)
            if not rec.appended and fut.done() and fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]
        return fut

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            **kwargs: Any) -> RecordMetadata:
        fut = await self.send(topic, value, key, **kwargs)
        return await fut

    def enqueue(self, rec: PendingRecord, on_delivery: DeliveryCallback | None = None,
                sink: Any = None) -> Any:
        """Buffer a record now if its topic is known and memory allows, else queue it behind
        the records already waiting (order is kept). Runs on the loop. The returned future
        (an asyncio one, or `sink`: any object with Future's done/set_result/set_exception,
        such as the synchronous face's DeliveryHandle) gets the RecordMetadata."""
        assert self.loop is not None, "call start() first"
        fut = self.loop.create_future() if sink is None else sink
        if on_delivery is not None:
            fut.add_done_callback(_callback(on_delivery))
        self.accumulator.append(rec, fut)
        return fut

    async def flush(self, timeout: float | None = None) -> int:
        """Send all buffered records now and wait for their delivery (or `timeout` seconds).
        Returns how many records are still undelivered."""
        return await self.accumulator.flush(timeout)

    def __len__(self) -> int:
        return self.accumulator.undelivered()

    async def partitions_for(self, topic: str) -> list[int]:
        return await self.client.ensure_topic(topic, self.max_block)

    # -- transactions (KIP-98; confluent-kafka's method names) ----------------------------------
    def _require_txn(self) -> tuple[TransactionManager, TransactionalRequests]:
        if self.txn is None or self._txn_requests is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional "
                                    "producer.")
        return self.txn, self._txn_requests

    def _deadline(self, timeout: float | None) -> float:
        assert self.loop is not None
        return self.loop.time() + (self.max_block if timeout is None else max(0.0, timeout))

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Get the producer id and epoch of `transactional.id` from its transaction
        coordinator (fencing older producers with the same id, and completing their pending
        transaction). Waits at most `timeout` seconds (default max.block.ms): KafkaTimeoutError
        then, and calling again resumes."""
        txn, requests = self._require_txn()
        assert self._txn_lock is not None
        txn.begin_init()
        async with self._txn_lock:
            await requests.init_producer_id(self._deadline(timeout))
        self._new_producer_id()

    def _new_producer_id(self) -> None:
        assert self.txn is not None
        self.idempotence.set_producer_id(self.txn.producer_id, self.txn.producer_epoch)
        log.debug("Transactional id %s: producer id %d epoch %d", self.transactional_id,
                  self.producer_id, self.producer_epoch)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on belong to it."""
        txn, _ = self._require_txn()
        txn.begin_transaction()

    async def send_offsets_to_transaction(
            self, offsets: Mapping[Any, int | OffsetAndMetadata] | Sequence[Any],
            group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None) -> None:
        """Commit a consumer group's offsets as part of the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit to the group's coordinator with the consumer's generation and member
        id, KIP-447). `offsets` maps partitions to the next offset to consume (or is a list of
        TopicPartition-like objects with an offset, as confluent-kafka takes);
        `group_metadata` is Consumer.consumer_group_metadata() (a group id alone skips the
        generation check)."""
        txn, requests = self._require_txn()
        assert self._txn_lock is not None
        group = group_metadata if isinstance(group_metadata, ConsumerGroupMetadata) \
            else ConsumerGroupMetadata(str(group_metadata))
        if not group.group_id:
            raise IllegalStateError("Consumer group metadata must have a group id")
        txn.check_send_offsets()
        wanted = offsets_of(offsets)
        if not wanted:
            return
        async with self._txn_lock:
            await requests.send_offsets(wanted, group, self._deadline(timeout))

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver the transaction's records (flush), then commit it (EndTxn): readers in
        read_committed see them from then on. A record that failed leaves the transaction to
        be aborted (this raises its error); a fatal error (fenced) raises for good. Calling
        again after a KafkaTimeoutError resumes the commit."""
        txn, _ = self._require_txn()
        if txn.state is not TxnState.COMMITTING_TRANSACTION:
            txn.begin_commit()
        await self._complete_transaction(True, self._deadline(timeout))

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent fail (TransactionAbortedError), the
        coordinator writes ABORT markers (EndTxn). Also the way out of an abortable error."""
        txn, _ = self._require_txn()
        if txn.state is not TxnState.ABORTING_TRANSACTION:
            txn.begin_abort()
        self.accumulator.abort_undrained(TransactionAbortedError())
        await self._complete_transaction(False, self._deadline(timeout))

    async def _complete_transaction(self, commit: bool, deadline: float) -> None:
        assert self.loop is not None and self._txn_lock is not None
        txn, requests = self._require_txn()
        left = await self.flush(max(0.0, deadline - self.loop.time()))
        if left:
            raise KafkaTimeoutError(f"{left} record(s) of the transaction were not delivered "
                                    "in time; call again to resume")
        if commit and txn.state is not TxnState.COMMITTING_TRANSACTION:
            txn.maybe_fail_with_error()  # a record failed: the transaction must be aborted
        async with self._txn_lock:
            if txn.transaction_started:
                await requests.end_txn(commit, deadline)
            txn.complete_transaction()
            if txn.state is TxnState.INITIALIZING:  # a batch failed: next epoch (KIP-360)
                await requests.init_producer_id(deadline, bump=True)
                self._new_producer_id()


def _callback(cb: DeliveryCallback) -> Callable[[asyncio.Future[RecordMetadata]], None]:
    def done(fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled():
            cb(KafkaError("delivery cancelled"), None)
        elif fut.exception() is not None:
            exc = fut.exception()
            cb(exc if isinstance(exc, KafkaError) else KafkaError(repr(exc)), None)
        else:
            cb(None, fut.result())
    return done


# ---------------------------------------------------------------------------------------------
