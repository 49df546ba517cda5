"""The producer's record accumulator (Kafka's RecordAccumulator, with its BufferPool's limit).

Records are appended to the open batch of their partition (`batch.size` bytes of encoded
records; a larger record gets a batch of its own). A record whose topic has no metadata yet, or
that would take the buffered bytes past `buffer.memory`, waits in a queue behind the records
already waiting (order is kept), at most `max.block.ms`. A partition's first batch is ready to
send when it is full, when `linger.ms` has passed since it was opened, when it was sent before
(a retry), or on flush/close; ready() groups the ready partitions by leader and drain() takes
one batch per partition for a request of at most `max.request.size` bytes. Batches failed
retriably go back to the head of their partition's queue in sequence order (reenqueue), and
each partition keeps its batches in flight until the broker answers them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from .cluster_metadata import KafkaClient
from .delivery import BatchResult, complete_batch
from .errors import KafkaError, KafkaTimeoutError
from .idempotence import IdempotenceState
from .partitioner import Partitioner
from .producer_batch import PartitionBatches, PendingRecord, ProducerBatch, RecordSink
from .transaction_manager import TransactionManager
from .types import TopicPartition


class RecordAccumulator:
    """The batches of each partition, the records waiting for metadata or memory, and the
    buffered bytes. `wake` wakes the sender (a batch to send, a linger timer to arm, a
    partition to add to the transaction)."""

    def __init__(self, client: KafkaClient, partitioner: Partitioner,
                 idempotence: IdempotenceState, txn: TransactionManager | None,
                 wake: Callable[[], None], *, batch_size: int, linger: float,
                 delivery_timeout: float, max_block: float, buffer_memory: int,
                 retry_backoff: float) -> None:
        self.client = client
        self.partitioner = partitioner
        self.idempotence = idempotence
        self.txn = txn
        self.wake = wake
        self.batch_size = batch_size
        self.linger = linger
        self.delivery_timeout = delivery_timeout
        self.max_block = max_block
        self.buffer_memory = buffer_memory
        self.retry_backoff = retry_backoff
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.states: dict[TopicPartition, PartitionBatches] = {}
        self.waiting: deque[tuple[PendingRecord, RecordSink]] = deque()
        self.waiting_task: asyncio.Task[None] | None = None
        self.buffered = 0
        self.flushing = 0
        self.closed = False
        self.memory_freed: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._rotate = 0
        # per metadata object: topic -> (partition count, partitions with a live leader)
        self._topics_of: Any = None
        self._topic_info: dict[str, tuple[int, list[int]]] = {}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.memory_freed = asyncio.Event()

    def close(self) -> None:
        """From now on every batch is ready, and no record is accepted."""
        self.closed = True

    def state(self, tp: TopicPartition) -> PartitionBatches:
        st = self.states.get(tp)
        if st is None:
            st = self.states[tp] = PartitionBatches()
        return st

    # -- appending -------------------------------------------------------------------------------
    def append(self, rec: PendingRecord, fut: RecordSink) -> None:
        """Append a record now if its topic is known and memory allows, else queue it behind
        the records already waiting."""
        assert self.loop is not None
        if self.waiting or not self._try_append(rec, fut):
            rec.enqueued = self.loop.time()  # max.block.ms runs from here
            self.waiting.append((rec, fut))
            if self.waiting_task is None or self.waiting_task.done():
                self.waiting_task = self.loop.create_task(self._drain_waiting())

    async def wait_appended(self, fut: RecordSink) -> None:
        while not fut.done() and any(f is fut for _, f in self.waiting):
            task = self.waiting_task
            if task is None or task.done():
                return
            await asyncio.wait([task], timeout=0.05)

    async def _drain_waiting(self) -> None:
        assert self.loop is not None and self.memory_freed is not None
        while self.waiting:
            rec, fut = self.waiting[0]
            deadline = rec.enqueued + self.max_block
            try:
                if fut.done():
                    self.waiting.popleft()
                    continue
                if self.client.metadata.partitions_for(rec.topic) is None:
                    await self.client.ensure_topic(rec.topic, max(0.0, deadline - self.loop.time()))
                while self.buffered + rec.size > self.buffer_memory and self.buffered:
                    left = deadline - self.loop.time()
                    if left <= 0:
                        raise KafkaTimeoutError(
                            f"buffer.memory ({self.buffer_memory} bytes) stayed full for "
                            f"max.block.ms")
                    self.memory_freed.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.memory_freed.wait(), left)
                if self._try_append(rec, fut):
                    self.waiting.popleft()
                else:
                    await asyncio.sleep(self.retry_backoff)
            except KafkaError as exc:
                self.waiting.popleft()
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
        if self.buffered and self.buffered + rec.size > self.buffer_memory:
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
                self.wake()  # AddPartitionsToTxn before the partition's first batch
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        new_batch = False
        if not dq or not dq[-1].append(rec, fut, self.batch_size):
            now = self.loop.time()
            batch = ProducerBatch(tp, now, now + self.delivery_timeout, self.loop)
            batch.append(rec, fut, self.batch_size)
            dq.append(batch)
            new_batch = True
        self.buffered += rec.size
        rec.appended = True
        if rec.partition is None:
            self.partitioner.record_appended(rec.topic, p, rec.key, rec.size, n, available)
        if new_batch or dq[0].closed:
            self.wake()  # a batch to send, or a linger timer to arm
        return True

    # -- flushing --------------------------------------------------------------------------------
    async def flush(self, timeout: float | None = None) -> int:
        """Make every batch ready and wait for their delivery (or `timeout` seconds). Returns
        how many records are still undelivered."""
        assert self.loop is not None
        self.flushing += 1
        self.wake()
        loop = self.loop
        deadline = None if timeout is None else loop.time() + timeout
        try:
            # Records still waiting for metadata or memory first join their batches.
            while self.waiting and self.waiting_task is not None \
                    and not self.waiting_task.done():
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return self.undelivered()
                await asyncio.wait([self.waiting_task], timeout=left)
            waits: list[asyncio.Future[Any]] = []
            for dq in self.batches.values():
                waits.extend(b.done for b in dq)
            for st in self.states.values():
                waits.extend(b.done for b in st.inflight)
                waits.extend(b.done for b in st.failed)
            pending = [w for w in waits if not w.done()]
            if pending:
                await asyncio.wait(pending, timeout=None if deadline is None
                                   else max(0.0, deadline - loop.time()))
            return self.undelivered()
        finally:
            self.flushing -= 1

    def undelivered(self) -> int:
        n = len(self.waiting)
        n += sum(b.count for dq in self.batches.values() for b in dq)
        n += sum(b.count for st in self.states.values() for b in st.inflight + st.failed)
        return n

    def has_unsent(self) -> bool:
        """Records waiting, batches queued, or failed batches to resend."""
        return (any(self.batches.values()) or any(st.failed for st in self.states.values())
                or bool(self.waiting))

    # -- what the sender takes -------------------------------------------------------------------
    def expire(self, now: float) -> None:
        """Fail the batches whose delivery.timeout.ms has passed before they were sent."""
        for tp, dq in self.batches.items():
            while dq and dq[0].deadline <= now:
                b = dq.popleft()
                err = KafkaTimeoutError(
                    f"expiring {b.count} record(s) for {tp}: {self.delivery_timeout * 1000:.0f} "
                    "ms has passed since batch creation (delivery.timeout.ms)")
                if self.txn is not None:
                    self.txn.batch_failed(int(ErrorCode.request_timed_out), err)
                elif self.idempotence.enabled and b.base_sequence >= 0:
                    self.idempotence.sequence_gap(tp)  # start a new producer id
                self.fail(b, err)

    def ready(self, now: float) -> tuple[dict[int, list[TopicPartition]], float | None, bool]:
        """The partitions with a batch ready to send, by leader; when to look again (None: on
        the next wakeup); whether a partition's leader is unknown."""
        md = self.client.metadata
        next_at: float | None = None
        by_node: dict[int, list[TopicPartition]] = {}
        unknown_leader = False
        for tp, dq in self.batches.items():
            if not dq:
                continue
            st = self.state(tp)
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
            if self.idempotence.in_flight_limit_reached(st.inflight):
                continue
            ready = (first.closed or len(dq) > 1 or first.attempts > 0 or self.flushing
                     or self.closed or now >= first.created + self.linger)
            if not ready:
                at = first.created + self.linger
                next_at = at if next_at is None else min(next_at, at)
                continue
            by_node.setdefault(leader, []).append(tp)
        return by_node, next_at, unknown_leader

    def drain(self, tps: list[TopicPartition], max_request_size: int) -> list[ProducerBatch]:
        """The first batch of each of `tps` (ready, of one leader), as many as fit in
        `max.request.size`; they are in flight from now on, with their sequences."""
        # Rotate the starting partition so that no partition starves under max.request.size.
        self._rotate = (self._rotate + 1) % max(1, len(tps))
        tps = tps[self._rotate:] + tps[:self._rotate]
        batches: list[ProducerBatch] = []
        size = 0
        for tp in tps:
            dq = self.batches[tp]
            b = dq[0]
            if batches and size + b.size > max_request_size:
                continue
            dq.popleft()
            b.closed = True
            if self.idempotence.stale(b):
                self.fail(b, KafkaError.for_code(
                    ErrorCode.out_of_order_sequence_number,
                    f"Attempted to retry sending a batch but the producer id changed from "
                    f"{b.producer_id} to {self.idempotence.producer_id} in the mean time. "
                    "This batch will be dropped.", context=str(tp)))
                continue
            self.idempotence.assign(b)
            b.attempts += 1
            self.state(tp).inflight.append(b)
            batches.append(b)
            size += b.size
        return batches

    def reenqueue(self, tp: TopicPartition, now: float) -> None:
        """Once none of the partition's batches is in flight, the failed ones go back to the
        head of its queue in sequence order, to be resent after retry.backoff.ms."""
        st = self.state(tp)
        if st.failed and not st.inflight:
            st.failed.sort(key=lambda x: x.order)
            dq = self.batches.setdefault(tp, deque())
            dq.extendleft(reversed(st.failed))
            st.failed = []
            st.backoff_until = now + self.retry_backoff

    # -- completing batches ----------------------------------------------------------------------
    def complete(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        complete_batch(b.futures, BatchResult(b.tp.topic, b.tp.partition, base_offset,
                                              log_append_time, b.stamps, b.sizes))
        self.deallocate(b)

    def fail(self, b: ProducerBatch, exc: KafkaError) -> None:
        for fut in b.futures:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # a caller may never look: no "never retrieved" noise
        self.deallocate(b)

    def deallocate(self, b: ProducerBatch) -> None:
        self.buffered = max(0, self.buffered - b.memory)
        b.memory = 0
        if not b.done.done():
            b.done.set_result(None)
        if self.memory_freed is not None:
            self.memory_freed.set()

    def abort_undrained(self, exc: KafkaError) -> None:
        """Fail the records not yet sent (in flight ones complete as the broker answers):
        Kafka's abortUndrainedBatches."""
        while self.waiting:
            _, fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        for dq in self.batches.values():
            while dq:
                self.fail(dq.popleft(), exc)

    def abort_all(self, exc: KafkaError) -> None:
        """Fail every record, in flight or not (Kafka's abortIncompleteBatches)."""
        self.abort_undrained(exc)
        for st in self.states.values():
            for b in st.inflight + st.failed:
                self.fail(b, exc)
            st.inflight.clear()
            st.failed.clear()
