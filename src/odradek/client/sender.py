"""The producer's sender task (Kafka's Sender): it takes the ready batches from the record
accumulator, sends one Produce request per leader broker with at most one batch per partition,
and handles the answers.

At most `max.in.flight.requests.per.connection` requests are outstanding per broker. Ordering
under retries: when a batch of a partition fails retriably, nothing more of that partition is
sent until its in-flight batches have all come back; the failed ones then go back to the head
of the partition's queue in sequence order and are resent with their original sequences (Kafka
likewise retries in sequence order, up to 5 in flight). UNKNOWN_PRODUCER_ID, or an
OUT_OF_ORDER_SEQUENCE_NUMBER not explained by an earlier failure, resets the producer id
(InitProducerId) once nothing is in flight.

A batch keeps its producer id and sequence through its retries (Kafka's RecordAccumulator: "the
previous attempt may actually have been accepted, and if we change the producer id and sequence
here, this attempt will also be accepted, causing a duplicate"). Only a batch that the brokers
refused by its sequence on every attempt (never in the log) is stamped again under the new
producer id; one that may have been written fails with the broker's error, its outcome unknown
to the application, as Kafka's producer before KIP-360's epoch bump (2.4's canRetry and
Sender.completeBatch) fails a retry whose producer id was reset. UNKNOWN_PRODUCER_ID is resent
under a new id only when the log start offset shows that the broker removed the producer's
state with the log's head (lastAckedOffset < logStartOffset), or retried as it is while the
broker does not know its log start offset (-1).

With a transactional producer each pass also adds the new partitions to the transaction
(AddPartitionsToTxn, one request at a time) and, in an error state or while aborting, fails
the batches not yet sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.compression import Codec
from .accumulator import RecordAccumulator
from .cluster_metadata import REFRESH_ERRORS, KafkaClient
from .errors import (
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortedError,
    UnsupportedVersionError,
    is_retriable,
)
from .idempotence import IdempotenceState
from .producer_batch import ProducerBatch
from .transaction_manager import TransactionManager, TxnState
from .txn_requests import TransactionalRequests
from .types import TopicPartition

log = logging.getLogger("odradek.client.producer")

# The broker's refusals of a batch by its producer id and sequence, checked before anything is
# appended: an attempt answered so was not written.
SEQUENCE_REFUSALS = frozenset({ErrorCode.out_of_order_sequence_number,
                               ErrorCode.unknown_producer_id})


class Sender:
    """Drains the accumulator to the brokers and completes the batches with their answers."""

    def __init__(self, client: KafkaClient, accumulator: RecordAccumulator,
                 idempotence: IdempotenceState, txn: TransactionManager | None,
                 txn_requests: TransactionalRequests | None, *, acks: int, retries: int,
                 max_in_flight: int, max_request_size: int, request_timeout_ms: int,
                 retry_backoff: float, delivery_timeout: float, codec: Codec,
                 transactional_id: str | None) -> None:
        self.client = client
        self.accumulator = accumulator
        self.idempotence = idempotence
        self.txn = txn
        self.txn_requests = txn_requests
        self.acks = acks
        self.retries = retries
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff
        self.delivery_timeout = delivery_timeout
        self.codec = codec
        self.transactional_id = transactional_id
        self.fatal: KafkaError | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._node_inflight: dict[int, int] = {}
        self._connecting: set[int] = set()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # The transaction's coordinator requests run one at a time, under the producer's lock.
        self._txn_lock: asyncio.Lock | None = None
        self._adding_partitions = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop, txn_lock: asyncio.Lock) -> None:
        self.loop = loop
        self._wakeup = asyncio.Event()
        self._txn_lock = txn_lock
        self._task = loop.create_task(self._run())

    def wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def close(self, timeout: float | None) -> None:
        """Once the accumulator is closed: let the task send what it can (at most `timeout`
        seconds), then stop it and what it started."""
        self.wake()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 0 if timeout == 0
                                       else max(timeout or 5.0, 0.1))
            except (TimeoutError, Exception):
                self._task.cancel()
        for t in list(self._tasks):
            t.cancel()

    def _spawn(self, coro: Any) -> None:
        assert self.loop is not None
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _inflight_total(self) -> int:
        return sum(self._node_inflight.values())

    def _has_work(self) -> bool:
        return self.accumulator.has_unsent() or self._inflight_total() > 0

    # -- the loop --------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self.loop is not None and self._wakeup is not None
        loop = self.loop
        acc = self.accumulator
        while True:
            if acc.closed and (not self._has_work() or self.fatal is not None):
                return
            self._wakeup.clear()
            now = loop.time()
            acc.expire(now)
            if self.txn is not None:
                self._transaction_housekeeping()
            if self.idempotence.need_pid and self._inflight_total() == 0 \
                    and any(acc.batches.values()):
                await self._init_producer_id()
                continue
            next_at = self._send_ready(now)
            timeout = None if next_at is None else max(0.0, next_at - loop.time())
            if timeout is None or timeout > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _init_producer_id(self) -> None:
        """InitProducerId of an idempotent, non-transactional producer (any broker)."""
        assert self.loop is not None
        acc = self.accumulator
        while not acc.closed or self._has_work():
            acc.expire(self.loop.time())  # batches keep their delivery.timeout.ms meanwhile
            if not any(acc.batches.values()):
                return  # nothing to send: ask when there is
            try:
                resp = await self.client.send_any(22, transactional_id=None,
                                                  transaction_timeout=self.request_timeout_ms,
                                                  producer_id=-1, producer_epoch=-1)
            except UnsupportedVersionError as exc:
                fatal = self.idempotence.unsupported(exc)
                if fatal is not None:
                    self.fatal = fatal
                    acc.abort_all(fatal)
                return
            except KafkaError as exc:
                log.debug("InitProducerId failed: %s", exc)
                await asyncio.sleep(self.retry_backoff)
                continue
            if resp.error_code != ErrorCode.none:
                if ErrorCode(resp.error_code).retriable:
                    await asyncio.sleep(self.retry_backoff)
                    continue
                self.fatal = KafkaError.for_code(resp.error_code, context="InitProducerId")
                acc.abort_all(self.fatal)
                self.idempotence.need_pid = False
                return
            self.idempotence.set_producer_id(resp.producer_id, resp.producer_epoch)
            self.idempotence.need_pid = False
            log.debug("Producer id %d epoch %d", resp.producer_id, resp.producer_epoch)
            return

    # -- sending ---------------------------------------------------------------------------------
    def _send_ready(self, now: float) -> float | None:
        """Send what is ready; return when to look again (None: on the next wakeup)."""
        if self.idempotence.need_pid:
            return None
        by_node, next_at, unknown_leader = self.accumulator.ready(now)
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
            self._send_to(node, conn, tps)
        return next_at

    async def _connect(self, node: int) -> None:
        try:
            await self.client.connection(node)
        except KafkaError as exc:
            log.debug("Cannot connect to node %d: %s", node, exc)
            await asyncio.sleep(self.retry_backoff)
        finally:
            self._connecting.discard(node)
            self.wake()

    def _send_to(self, node: int, conn: Any, tps: list[TopicPartition]) -> None:
        acc = self.accumulator
        batches = acc.drain(tps, self.max_request_size)
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
                acc.state(b.tp).inflight.remove(b)
                acc.fail(b, exc)
            return
        if self.acks == 0:
            conn.send_nowait(req, expect_response=False)
            for b in batches:
                acc.state(b.tp).inflight.remove(b)
                acc.complete(b, -1, -1)
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
                                       getattr(p, "error_message", None),
                                       getattr(p, "log_start_offset", -1))
            for b in by_tp.values():  # not answered: treat as a network error
                self._batch_result(b, int(ErrorCode.network_exception), -1, -1,
                                   "partition missing from the Produce response")
        finally:
            self._node_inflight[node] = max(0, self._node_inflight.get(node, 0) - 1)
            self.wake()

    def _batch_result(self, b: ProducerBatch, code: int, base_offset: int, log_append_time: int,
                      message: str | None, log_start_offset: int = -1) -> None:
        assert self.loop is not None
        acc, idem = self.accumulator, self.idempotence
        st = acc.state(b.tp)
        if b in st.inflight:
            st.inflight.remove(b)
        now = self.loop.time()
        if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
            idem.acked(b, base_offset if code == ErrorCode.none else -1)
            acc.complete(b, base_offset if code == ErrorCode.none else -1, log_append_time)
        else:
            if code not in SEQUENCE_REFUSALS:
                b.may_be_written = True  # this attempt's outcome is unknown
            retriable = is_retriable(code)
            if self.txn is not None and code in SEQUENCE_REFUSALS:
                retriable = False  # abortable: the next transaction gets a new epoch
            elif code == ErrorCode.out_of_order_sequence_number:
                # Explained by an earlier batch of this partition failing now: resend in order.
                # Behind a gap (an earlier batch failed for good) every later sequence of this
                # producer id is refused: a batch never written is sent again under the new
                # id, one that an earlier attempt may have written fails. Otherwise the broker
                # lost acknowledged data: report it.
                gap = idem.has_gap(b.tp)
                restamp = gap and not b.may_be_written
                retriable = bool(st.failed) or restamp
                idem.need_pid = idem.need_pid or gap
                if restamp:
                    b.base_sequence = -1
            elif code == ErrorCode.unknown_producer_id:
                if log_start_offset < 0:
                    retriable = True  # the broker did not know its log start: resend as it is
                elif idem.state_removed(b.tp, log_start_offset) or not b.may_be_written:
                    retriable = True
                    idem.need_pid = True
                    b.base_sequence = -1  # resent under the new producer id
                else:
                    retriable = False
            if code in REFRESH_ERRORS:
                self.client.request_update()
            if retriable and b.attempts <= self.retries and now < b.deadline and not acc.closed:
                log.debug("Retrying %s (attempt %d) after %s", b.tp, b.attempts + 1,
                          _code_name(code))
                st.failed.append(b)
            else:
                if retriable and now >= b.deadline:
                    err: KafkaError = KafkaTimeoutError(
                        f"delivery.timeout.ms passed for {b.count} record(s) of {b.tp} "
                        f"(last error {_code_name(code)})")
                else:
                    if code in SEQUENCE_REFUSALS and b.may_be_written and self.txn is None:
                        message = (f"{message or _code_name(code)}; an earlier attempt may have "
                                   "been written, so the batch is not sent again under a new "
                                   "producer id")
                    err = KafkaError.for_code(code, message, context=f"{b.tp}")
                if self.txn is not None:
                    self.txn.batch_failed(code, err)
                    if self.txn.state is TxnState.FATAL_ERROR:
                        self.fatal = self.txn.last_error
                elif idem.enabled and b.base_sequence >= 0:
                    idem.sequence_gap(b.tp)  # later sequences of this producer id are refused
                acc.fail(b, err)
        acc.reenqueue(b.tp, now)

    # -- transactions ----------------------------------------------------------------------------
    def _transaction_housekeeping(self) -> None:
        """On each pass: add new partitions to the transaction (one request at a time); in an
        error state or aborting, fail the batches not yet sent (Kafka's
        abortUndrainedBatches)."""
        txn = self.txn
        assert txn is not None and self.loop is not None
        if txn.state is TxnState.FATAL_ERROR:
            self.fatal = txn.last_error
        if txn.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            self.accumulator.abort_undrained(txn.last_error or TransactionAbortedError())
        elif txn.state is TxnState.ABORTING_TRANSACTION:
            self.accumulator.abort_undrained(TransactionAbortedError())
        elif txn.new_partitions and not self._adding_partitions:
            self._adding_partitions = True
            self._spawn(self._add_partitions())

    async def _add_partitions(self) -> None:
        txn, requests = self.txn, self.txn_requests
        assert self.loop is not None and self._txn_lock is not None
        assert txn is not None and requests is not None
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
            self.wake()



def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"
