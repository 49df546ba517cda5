"""The producer (S-7.1): an accumulator of record batches per partition and a sender task.

Records are appended to the open batch of their partition (`batch.size` bytes of encoded
records; a larger record gets a batch of its own). A batch is sent when it is full, when
`linger.ms` has passed since it was opened, or on flush/close. Each Produce request carries at
most one batch per partition and at most `max.request.size` bytes, to the partition's leader;
at most `max.in.flight.requests.per.connection` requests are outstanding per broker.

Idempotence (on by default, as in Kafka 3+): the producer gets a producer id and epoch
(InitProducerId) and numbers each partition's batches with a sequence, so a batch the broker
already wrote but whose answer was lost is recognised as a duplicate when retried. Ordering under
retries: when a batch of a partition fails retriably, nothing more of that partition is sent
until its in-flight batches have all come back; the failed ones then go back to the head of the
partition's queue in sequence order and are resent with their original sequences (Kafka
likewise retries in sequence order, up to 5 in flight). UNKNOWN_PRODUCER_ID, or an
OUT_OF_ORDER_SEQUENCE_NUMBER not explained by an earlier failure, resets the producer id
once nothing is in flight.

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
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from ..common.clock import now_ms
from ..protocol.compression import Codec
from .cluster_metadata import REFRESH_ERRORS, KafkaClient
from .config import PRODUCER, acks_value, build_config, to_bytes
from .delivery import (
    BatchResult,
    DeliveryCallback,
    complete_batch,
)
from .errors import (
    ConfigException,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    TransactionAbortedError,
    UnsupportedVersionError,
)
from .partitioner import Partitioner
from .producer_batch import (
    BATCH_OVERHEAD,
    PartitionBatches,
    PendingRecord,
    ProducerBatch,
    RecordSink,
)
from .transaction_manager import TransactionManager, TxnState
from .txn_requests import TransactionalRequests, offsets_of
from .types import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata, TopicPartition

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
        self.idempotent = self._idempotence(cfg)
        self.partitioner = Partitioner(cfg["partitioner"], self.batch_size)
        self.client = KafkaClient(cfg)
        self.producer_id = -1
        self.producer_epoch = -1
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._states: dict[TopicPartition, PartitionBatches] = {}
        self._waiting: deque[tuple[PendingRecord, RecordSink]] = deque()
        self._waiting_task: asyncio.Task[None] | None = None
        self._node_inflight: dict[int, int] = {}
        self._connecting: set[int] = set()
        self._buffered = 0
        self._memory_freed: asyncio.Event | None = None
        self._wakeup: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._flushing = 0
        self._closing = False
        self._closed = False
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
        self._adding_partitions = False
        self._need_pid = self.idempotent and self.txn is None
        self._fatal: KafkaError | None = None
        self._rotate = 0
        # per metadata object: topic -> (partition count, partitions with a live leader)
        self._topics_of: Any = None
        self._topic_info: dict[str, tuple[int, list[int]]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    def _idempotence(self, cfg: dict[str, Any]) -> bool:
        if not cfg["enable.idempotence"]:
            if self.transactional_id is not None:
                raise ConfigException("Cannot set a transactional.id without also enabling "
                                      "idempotence.")
            return False
        problems = []
        if self.acks != -1:
            problems.append("acks must be all")
        if self.max_in_flight > 5:
            problems.append("max.in.flight.requests.per.connection must be at most 5")
        if self.retries <= 0:
            problems.append("retries must be positive")
        if problems:
            if self.transactional_id is not None:
                raise ConfigException("transactional.id is set, which needs idempotence: "
                                      + "; ".join(problems))
            if "enable.idempotence" in cfg["_explicit"]:
                raise ValueError("enable.idempotence=true: " + "; ".join(problems))
            return False  # Kafka 3.2+: the default gives way to explicit conflicting settings
        return True

    @property
    def closed(self) -> bool:
        """Whether close() has begun."""
        return self._closed

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> AsyncProducer:
        self.loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._memory_freed = asyncio.Event()
        self._txn_lock = asyncio.Lock()
        await self.client.start()
        self._sender = self.loop.create_task(self._run())
        return self

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Send everything buffered (waiting at most `timeout` seconds), then stop."""
        if self._closed:
            return
        try:
            await self.flush(timeout)
        finally:
            self._closing = True
            self._closed = True
            self._wake()
            if self._sender is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._sender), 0 if timeout == 0
                                           else max(timeout or 5.0, 0.1))
                except (TimeoutError, Exception):
                    self._sender.cancel()
            for t in list(self._tasks):
                t.cancel()
            self._fail_all(KafkaError("producer closed before the record was sent"))
            await self.client.close()

    # -- sending ---------------------------------------------------------------------------------
    def _make_record(self, topic: str, value: Any, key: Any, partition: int | None,
                     timestamp_ms: int | None, headers: Headers | None) -> PendingRecord:
        if self._closing:
            raise KafkaError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
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
            await self._wait_appended(fut)
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
        if self._waiting or not self._try_append(rec, fut):
            rec.enqueued = self.loop.time()  # max.block.ms runs from here
            self._waiting.append((rec, fut))
            if self._waiting_task is None or self._waiting_task.done():
                self._waiting_task = self.loop.create_task(self._drain_waiting())
        return fut

    async def _wait_appended(self, fut: RecordSink) -> None:
        while not fut.done() and any(f is fut for _, f in self._waiting):
            task = self._waiting_task
            if task is None or task.done():
                return
            await asyncio.wait([task], timeout=0.05)

    async def _drain_waiting(self) -> None:
        assert self.loop is not None and self._memory_freed is not None
        while self._waiting:
            rec, fut = self._waiting[0]
            deadline = rec.enqueued + self.max_block
            try:
                if fut.done():
                    self._waiting.popleft()
                    continue
                if self.client.metadata.partitions_for(rec.topic) is None:
                    await self.client.ensure_topic(rec.topic, max(0.0, deadline - self.loop.time()))
                while self._buffered + rec.size > self.buffer_memory and self._buffered:
                    left = deadline - self.loop.time()
                    if left <= 0:
                        raise KafkaTimeoutError(
                            f"buffer.memory ({self.buffer_memory} bytes) stayed full for "
                            f"max.block.ms")
                    self._memory_freed.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._memory_freed.wait(), left)
                if self._try_append(rec, fut):
                    self._waiting.popleft()
                else:
                    await asyncio.sleep(self.retry_backoff)
            except KafkaError as exc:
                self._waiting.popleft()
                if not fut.done():
                    fut.set_exception(exc)

    def _try_append(self, rec: PendingRecord, fut: RecordSink) -> bool:
        assert self.loop is not None
        md = self.client.metadata
        if md is not self._topics_of:  # metadata objects are replaced, never changed
            self._topics_of = md
            self._topic_info.clear()
        info = self._topic_info.get(rec.topic)
        if info is None:
            partitions = md.partitions_for(rec.topic)
            if partitions is None:
                return False
            info = self._topic_info[rec.topic] = (len(partitions),
                                                  md.available_partitions(rec.topic))
        if self._buffered and self._buffered + rec.size > self.buffer_memory:
            return False
        n, available = info
        if rec.partition is not None:
            if not 0 <= rec.partition < n:
                fut.set_exception(KafkaError(
                    f"partition {rec.partition} of topic {rec.topic} is not in [0, {n})"))
                return True
            p = rec.partition
        else:
            p = self.partitioner.partition(rec.topic, rec.key, n, available)
        tp = TopicPartition(rec.topic, p)
        if self.txn is not None:
            try:
                self.txn.maybe_add_partition(tp)  # raises outside a transaction
            except KafkaError as exc:
                fut.set_exception(exc)
                return True
            if self.txn.new_partitions:
                self._wake()  # AddPartitionsToTxn before the partition's first batch
        dq = self._batches.get(tp)
        if dq is None:
            dq = self._batches[tp] = deque()
        new_batch = False
        if not dq or not dq[-1].append(rec, fut, self.batch_size):
            now = self.loop.time()
            batch = ProducerBatch(tp, now, now + self.delivery_timeout, self.loop)
            batch.append(rec, fut, self.batch_size)
            dq.append(batch)
            new_batch = True
        self._buffered += rec.size
        rec.appended = True
        if rec.partition is None:
            self.partitioner.record_appended(rec.topic, p, rec.key, rec.size, n, available)
        if new_batch or dq[0].closed:
            self._wake()  # a batch to send, or a linger timer to arm
        return True

    async def flush(self, timeout: float | None = None) -> int:
        """Send all buffered records now and wait for their delivery (or `timeout` seconds).
        Returns how many records are still undelivered."""
        assert self.loop is not None
        self._flushing += 1
        self._wake()
        loop = self.loop
        deadline = None if timeout is None else loop.time() + timeout
        try:
            # Records still waiting for metadata or memory first join their batches.
            while self._waiting and self._waiting_task is not None \
                    and not self._waiting_task.done():
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return self._undelivered()
                await asyncio.wait([self._waiting_task], timeout=left)
            waits: list[asyncio.Future[Any]] = []
            for dq in self._batches.values():
                waits.extend(b.done for b in dq)
            for st in self._states.values():
                waits.extend(b.done for b in st.inflight)
                waits.extend(b.done for b in st.failed)
            pending = [w for w in waits if not w.done()]
            if pending:
                await asyncio.wait(pending, timeout=None if deadline is None
                                   else max(0.0, deadline - loop.time()))
            return self._undelivered()
        finally:
            self._flushing -= 1

    def _undelivered(self) -> int:
        n = len(self._waiting)
        n += sum(b.count for dq in self._batches.values() for b in dq)
        n += sum(b.count for st in self._states.values() for b in st.inflight + st.failed)
        return n

    def __len__(self) -> int:
        return self._undelivered()

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
        self.producer_id, self.producer_epoch = self.txn.producer_id, self.txn.producer_epoch
        for st in self._states.values():
            st.next_sequence = 0
            st.gap = False
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
        self._abort_undrained(TransactionAbortedError())
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

    def _transaction_housekeeping(self) -> None:
        """On each sender pass: add new partitions to the transaction (one request at a time);
        in an error state or aborting, fail the batches not yet sent (Kafka's
        abortUndrainedBatches)."""
        txn = self.txn
        assert txn is not None and self.loop is not None
        if txn.state is TxnState.FATAL_ERROR:
            self._fatal = txn.last_error
        if txn.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            self._abort_undrained(txn.last_error or TransactionAbortedError())
        elif txn.state is TxnState.ABORTING_TRANSACTION:
            self._abort_undrained(TransactionAbortedError())
        elif txn.new_partitions and not self._adding_partitions:
            self._adding_partitions = True
            self._spawn(self._add_partitions())

    async def _add_partitions(self) -> None:
        assert self.loop is not None and self._txn_lock is not None
        txn, requests = self._require_txn()
        try:
            async with self._txn_lock:
                parts = txn.take_new_partitions()
                if parts and txn.state in (TxnState.IN_TRANSACTION,
                                           TxnState.COMMITTING_TRANSACTION):
                    await requests.add_partitions(parts, self.loop.time() + self.delivery_timeout)
                elif parts:
                    txn.add_partitions_failed(parts, retry=False)
        except KafkaTimeoutError as exc:
            txn.abortable_error(exc)
        except KafkaError as exc:
            log.debug("AddPartitionsToTxn failed: %s", exc)
        finally:
            self._adding_partitions = False
            self._wake()

    def _abort_undrained(self, exc: KafkaError) -> None:
        """Fail the records not yet sent (in flight ones complete as the broker answers)."""
        while self._waiting:
            _, fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        for dq in self._batches.values():
            while dq:
                self._fail_batch(dq.popleft(), exc)

    # -- the sender ------------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _state(self, tp: TopicPartition) -> PartitionBatches:
        st = self._states.get(tp)
        if st is None:
            st = self._states[tp] = PartitionBatches()
        return st

    def _inflight_total(self) -> int:
        return sum(self._node_inflight.values())

    def _has_work(self) -> bool:
        return (any(self._batches.values()) or self._inflight_total() > 0
                or any(st.failed for st in self._states.values()) or bool(self._waiting))

    async def _run(self) -> None:
        assert self.loop is not None and self._wakeup is not None
        loop = self.loop
        while True:
            if self._closing and (not self._has_work() or self._fatal is not None):
                return
            self._wakeup.clear()
            now = loop.time()
            self._expire(now)
            if self.txn is not None:
                self._transaction_housekeeping()
            if self._need_pid and self._inflight_total() == 0 and any(self._batches.values()):
                await self._init_producer_id()
                continue
            next_at = self._drain(now)
            timeout = None if next_at is None else max(0.0, next_at - loop.time())
            if timeout is None or timeout > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _init_producer_id(self) -> None:
        assert self.loop is not None
        while not self._closed or self._has_work():
            self._expire(self.loop.time())  # batches keep their delivery.timeout.ms meanwhile
            if not any(self._batches.values()):
                return  # nothing to send: ask when there is
            try:
                resp = await self.client.send_any(22, transactional_id=None,
                                                  transaction_timeout=self.request_timeout_ms,
                                                  producer_id=-1, producer_epoch=-1)
            except UnsupportedVersionError as exc:
                if "enable.idempotence" in self.config["_explicit"]:
                    self._fatal = KafkaError(f"enable.idempotence=true: {exc}")
                    self._fail_all(self._fatal)
                else:
                    log.warning("The broker does not support idempotence (%s): disabled", exc)
                    self.idempotent = False
                self._need_pid = False
                return
            except KafkaError as exc:
                log.debug("InitProducerId failed: %s", exc)
                await asyncio.sleep(self.retry_backoff)
                continue
            if resp.error_code != ErrorCode.none:
                if ErrorCode(resp.error_code).retriable:
                    await asyncio.sleep(self.retry_backoff)
                    continue
                self._fatal = KafkaError.for_code(resp.error_code, context="InitProducerId")
                self._fail_all(self._fatal)
                self._need_pid = False
                return
            self.producer_id = resp.producer_id
            self.producer_epoch = resp.producer_epoch
            for st in self._states.values():
                st.next_sequence = 0
                st.gap = False
            self._need_pid = False
            log.debug("Producer id %d epoch %d", self.producer_id, self.producer_epoch)
            return

    def _expire(self, now: float) -> None:
        for tp, dq in self._batches.items():
            while dq and dq[0].deadline <= now:
                b = dq.popleft()
                err = KafkaTimeoutError(
                    f"expiring {b.count} record(s) for {tp}: {self.delivery_timeout * 1000:.0f} "
                    "ms has passed since batch creation (delivery.timeout.ms)")
                if self.txn is not None:
                    self.txn.batch_failed(int(ErrorCode.request_timed_out), err)
                elif self.idempotent and b.base_sequence >= 0:
                    self._need_pid = True  # its sequence leaves a gap: start a new producer id
                    self._state(tp).gap = True
                self._fail_batch(b, err)

    def _drain(self, now: float) -> float | None:
        """Send what is ready; return when to look again (None: on the next wakeup)."""
        md = self.client.metadata
        next_at: float | None = None
        by_node: dict[int, list[TopicPartition]] = {}
        unknown_leader = False
        if self._need_pid:
            return None
        for tp, dq in self._batches.items():
            if not dq:
                continue
            st = self._state(tp)
            if st.failed:
                continue  # waiting for the rest of its in-flight batches
            if now < st.backoff_until:
                next_at = st.backoff_until if next_at is None else min(next_at, st.backoff_until)
                continue
            if self.txn is not None and not self.txn.may_send_to(tp):
                continue  # not yet added to the transaction
            leader = md.leader(tp)
            if leader is None:
                unknown_leader = True
                continue
            first = dq[0]
            if self.idempotent and len(st.inflight) >= 5:
                continue
            ready = (first.closed or len(dq) > 1 or first.attempts > 0 or self._flushing
                     or self._closing or now >= first.created + self.linger)
            if not ready:
                at = first.created + self.linger
                next_at = at if next_at is None else min(next_at, at)
                continue
            by_node.setdefault(leader, []).append(tp)
        if unknown_leader:
            self.client.request_update()
            at = now + self.retry_backoff
            next_at = at if next_at is None else min(next_at, at)
        for node, tps in by_node.items():
            if self._node_inflight.get(node, 0) >= self.max_in_flight:
                continue
            conn = self.client.ready_connection(node)
            if conn is None:
                if node not in self._connecting:
                    self._connecting.add(node)
                    self._spawn(self._connect(node))
                continue
            self._send_to(node, conn, tps, now)
        return next_at

    async def _connect(self, node: int) -> None:
        try:
            await self.client.connection(node)
        except KafkaError as exc:
            log.debug("Cannot connect to node %d: %s", node, exc)
            await asyncio.sleep(self.retry_backoff)
        finally:
            self._connecting.discard(node)
            self._wake()

    def _spawn(self, coro: Any) -> None:
        assert self.loop is not None
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send_to(self, node: int, conn: Any, tps: list[TopicPartition], now: float) -> None:
        # Rotate the starting partition so that no partition starves under max.request.size.
        self._rotate = (self._rotate + 1) % max(1, len(tps))
        tps = tps[self._rotate:] + tps[:self._rotate]
        batches: list[ProducerBatch] = []
        size = 0
        for tp in tps:
            dq = self._batches[tp]
            b = dq[0]
            if batches and size + b.size > self.max_request_size:
                continue
            dq.popleft()
            b.closed = True
            if self.idempotent and (b.producer_id != self.producer_id or b.base_sequence < 0):
                st = self._state(tp)
                b.producer_id, b.producer_epoch = self.producer_id, self.producer_epoch
                b.base_sequence = st.next_sequence
                st.next_sequence = (st.next_sequence + b.count) & 0x7FFFFFFF
                b.transactional = self.txn is not None
                b.encoded = None
            b.attempts += 1
            self._state(tp).inflight.append(b)
            batches.append(b)
            size += b.size
        if not batches:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for b in batches:
            topics.setdefault(b.tp.topic, []).append(
                {"index": b.tp.partition, "records": b.encode(self.codec)})
        try:
            req = conn.build(0, acks=self.acks, timeout=self.request_timeout_ms,
                             transactional_id=self.transactional_id,
                             topic_data=[{"name": t, "partition_data": parts}
                                         for t, parts in topics.items()])
        except UnsupportedVersionError as exc:
            for b in batches:
                self._state(b.tp).inflight.remove(b)
                self._fail_batch(b, exc)
            return
        if self.acks == 0:
            conn.send_nowait(req, expect_response=False)
            for b in batches:
                self._state(b.tp).inflight.remove(b)
                self._complete_batch(b, -1, -1)
            return
        self._node_inflight[node] = self._node_inflight.get(node, 0) + 1
        fut = conn.send_nowait(req)
        self._spawn(self._await_response(node, conn, batches, fut))

    async def _await_response(self, node: int, conn: Any, batches: list[ProducerBatch],
                              fut: asyncio.Future[Any]) -> None:
        try:
            try:
                resp = await asyncio.wait_for(asyncio.shield(fut),
                                              self.request_timeout_ms / 1000 + 1)
            except TimeoutError:
                err = KafkaTimeoutError(f"Produce to node {node} timed out")
                conn.close(err)
                raise err from None
        except KafkaError as exc:
            self.client.node_failed(node)
            for b in batches:
                self._batch_result(b, int(ErrorCode.network_exception), -1, -1, str(exc))
        else:
            by_tp = {b.tp: b for b in batches}
            for t in resp.responses:
                for p in t.partition_responses:
                    b = by_tp.pop(TopicPartition(t.name, p.index), None)
                    if b is None:
                        continue
                    lat = p.log_append_time
                    lat_ms = -1
                    if lat is not None and not isinstance(lat, int):
                        lat_ms = int(lat.timestamp() * 1000)
                    elif isinstance(lat, int):
                        lat_ms = lat
                    self._batch_result(b, int(p.error_code), p.base_offset, lat_ms,
                                       getattr(p, "error_message", None))
            for b in by_tp.values():  # not answered: treat as a network error
                self._batch_result(b, int(ErrorCode.network_exception), -1, -1,
                                   "partition missing from the Produce response")
        finally:
            self._node_inflight[node] = max(0, self._node_inflight.get(node, 0) - 1)
            self._wake()

    def _batch_result(self, b: ProducerBatch, code: int, base_offset: int, log_append_time: int,
                      message: str | None) -> None:
        assert self.loop is not None
        st = self._state(b.tp)
        if b in st.inflight:
            st.inflight.remove(b)
        now = self.loop.time()
        if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
            self._complete_batch(b, base_offset if code == ErrorCode.none else -1,
                                 log_append_time)
        else:
            retriable = _retriable(code)
            if self.txn is not None and code in (ErrorCode.out_of_order_sequence_number,
                                                 ErrorCode.unknown_producer_id):
                retriable = False  # abortable: the next transaction gets a new epoch
            elif code == ErrorCode.out_of_order_sequence_number:
                # Explained by an earlier batch of this partition failing (now, or for good):
                # resend in order. Otherwise the broker lost acknowledged data: report it.
                retriable = bool(st.failed) or st.gap
                self._need_pid = self._need_pid or st.gap
            elif code == ErrorCode.unknown_producer_id:
                retriable = True
                self._need_pid = True
            if code in REFRESH_ERRORS:
                self.client.request_update()
            if retriable and b.attempts <= self.retries and now < b.deadline and not self._closed:
                log.debug("Retrying %s (attempt %d) after %s", b.tp, b.attempts + 1,
                          _code_name(code))
                st.failed.append(b)
            else:
                if retriable and now >= b.deadline:
                    err: KafkaError = KafkaTimeoutError(
                        f"delivery.timeout.ms passed for {b.count} record(s) of {b.tp} "
                        f"(last error {_code_name(code)})")
                else:
                    err = KafkaError.for_code(code, message, context=f"{b.tp}")
                if self.txn is not None:
                    self.txn.batch_failed(code, err)
                    if self.txn.state is TxnState.FATAL_ERROR:
                        self._fatal = self.txn.last_error
                elif self.idempotent and b.base_sequence >= 0:
                    st.gap = True  # later sequences of this producer id would be refused
                    self._need_pid = True
                self._fail_batch(b, err)
        if st.failed and not st.inflight:
            st.failed.sort(key=lambda x: x.order)
            dq = self._batches.setdefault(b.tp, deque())
            dq.extendleft(reversed(st.failed))
            st.failed = []
            st.backoff_until = now + self.retry_backoff

    def _complete_batch(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        complete_batch(b.futures, BatchResult(b.tp.topic, b.tp.partition, base_offset,
                                              log_append_time, b.stamps, b.sizes))
        self._release(b)

    def _fail_batch(self, b: ProducerBatch, exc: KafkaError) -> None:
        for fut in b.futures:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # a caller may never look: no "never retrieved" noise
        self._release(b)

    def _release(self, b: ProducerBatch) -> None:
        self._buffered = max(0, self._buffered - b.memory)
        b.memory = 0
        if not b.done.done():
            b.done.set_result(None)
        if self._memory_freed is not None:
            self._memory_freed.set()

    def _fail_all(self, exc: KafkaError) -> None:
        while self._waiting:
            _, fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        for dq in self._batches.values():
            while dq:
                self._fail_batch(dq.popleft(), exc)
        for st in self._states.values():
            for b in st.inflight + st.failed:
                self._fail_batch(b, exc)
            st.inflight.clear()
            st.failed.clear()


def _retriable(code: int) -> bool:
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


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
