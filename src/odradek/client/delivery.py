"""The synchronous producer's hand-over to its loop thread (S-7.1): a bounded queue of records
sent but not yet delivered, and the light delivery handle `Producer.send` returns.

`SendQueue.put` is called on the caller's threads: one lock, one deque append, and a wakeup of
the loop only when the queue goes from empty to non-empty (the loop drains everything queued by
then in one go). The bound covers every record from `send` until its delivery or failure, not
just the queue: at most `buffer.memory` bytes (Kafka's measure: the serialized key, value and
headers plus a record's overhead) and at most `queue.buffering.max.messages` records
(librdkafka's count bound). A send that does not fit blocks until earlier records are delivered,
for at most `max.block.ms`, then raises KafkaTimeoutError (Kafka's BufferPool message).

`DeliveryHandle` is a Future-like result per record (done / result / exception /
add_done_callback, and kafka-python's `get`) without a concurrent.futures.Future's per-object
condition: waiters share the queue's condition, notified as records complete. Only the loop
thread completes handles, without taking the lock unless some thread waits; the delivery
callback given to `send` runs right there, on the loop thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import KafkaError, KafkaTimeoutError
from .types import RecordMetadata

log = logging.getLogger("odradek.client.producer")

DeliveryCallback = Callable[[KafkaError | None, RecordMetadata | None], Any]


def fits(outstanding_bytes: int, outstanding_records: int, size: int, max_bytes: int,
         max_records: int) -> bool:
    """Whether a record of `size` bytes may join `outstanding_*` (records sent, not yet
    delivered) under the bounds. With nothing outstanding a record always fits (one larger than
    buffer.memory is refused before it gets here)."""
    if outstanding_records == 0:
        return True
    return outstanding_bytes + size <= max_bytes and outstanding_records < max_records


class SendQueue:
    """Records on their way from the caller's threads to the loop, and the bound on all records
    sent but not yet delivered. `put` runs on callers' threads, `take` and `release` on the
    loop thread."""

    def __init__(self, max_bytes: int, max_records: int, max_block: float) -> None:
        if max_bytes <= 0 or max_records <= 0:
            raise ValueError("buffer.memory and queue.buffering.max.messages must be positive")
        self.max_bytes = max_bytes
        self.max_records = max_records
        self.max_block = max_block
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.items: list[Any] = []
        self.waiters = 0  # threads in cond.wait: blocked senders and result() callers
        self.accepted_bytes = 0
        self.released_bytes = 0
        self.accepted = 0
        self.released = 0
        self.closed: KafkaError | None = None

    @property
    def outstanding(self) -> int:
        """Records sent and not yet delivered or failed."""
        return self.accepted - self.released

    def put(self, item: Any, size: int, can_block: bool = True) -> bool:
        """Queue `item` (holding `size` bytes until released). Returns True when the queue was
        empty: the caller then schedules one `take` on the loop. Blocks while the bound is
        reached, for at most max.block.ms; raises KafkaTimeoutError then (at once when
        `can_block` is false: the loop thread itself must never wait for the loop)."""
        with self.lock:
            if self.closed is not None:
                raise self.closed
            if (self.accepted - self.released >= self.max_records
                    or self.accepted_bytes - self.released_bytes + size > self.max_bytes) \
                    and not fits(self.accepted_bytes - self.released_bytes,
                                 self.accepted - self.released, size, self.max_bytes,
                                 self.max_records):
                self._wait_for_room(size, can_block)
            self.accepted_bytes += size
            self.accepted += 1
            self.items.append(item)
            return len(self.items) == 1

    def _wait_for_room(self, size: int, can_block: bool) -> None:
        deadline = time.monotonic() + self.max_block
        self.waiters += 1
        try:
            while not fits(self.accepted_bytes - self.released_bytes,
                           self.accepted - self.released, size, self.max_bytes,
                           self.max_records):
                if self.closed is not None:
                    raise self.closed
                left = deadline - time.monotonic()
                if not can_block:
                    raise KafkaTimeoutError(
                        f"the producer's buffer is full ({self.outstanding} records, "
                        f"{self.accepted_bytes - self.released_bytes} bytes undelivered) and a "
                        "delivery callback cannot wait for it: send from another thread")
                if left <= 0:
                    raise KafkaTimeoutError(
                        f"Failed to allocate memory within the configured max blocking time "
                        f"{self.max_block * 1000:.0f} ms (buffer.memory={self.max_bytes} bytes, "
                        f"queue.buffering.max.messages={self.max_records}; "
                        f"{self.outstanding} records undelivered)")
                self.cond.wait(left)
        finally:
            self.waiters -= 1

    def take(self) -> list[Any]:
        """Everything queued so far, in order (on the loop thread)."""
        with self.lock:
            items = self.items
            self.items = []
            return items

    def close(self, exc: KafkaError) -> None:
        """Blocked and later senders give up with `exc`."""
        with self.lock:
            self.closed = exc
            self.cond.notify_all()

    def wait(self, handle: DeliveryHandle, timeout: float | None) -> bool:
        """Wait until `handle` is done (or `timeout` seconds); True if it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            self.waiters += 1
            try:
                while not handle._done:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self.cond.wait(left)
                return True
            finally:
                self.waiters -= 1


class DeliveryHandle:
    """The delivery of one record: RecordMetadata or a KafkaError, with concurrent.futures.
    Future's reading methods. Completed once, on the producer's loop thread."""

    __slots__ = ("_batch", "_callbacks", "_done", "_exc", "_index", "_md", "_on_delivery",
                 "_queue", "_size")

    def __init__(self, queue: SendQueue, size: int,
                 on_delivery: DeliveryCallback | None = None) -> None:
        self._queue = queue
        self._size = size
        self._on_delivery = on_delivery
        self._callbacks: list[Callable[[DeliveryHandle], Any]] | None = None
        self._done = False
        self._md: RecordMetadata | None = None
        self._exc: BaseException | None = None
        # Completed with its batch: the batch's answer and this record's place in it; the
        # RecordMetadata is built when first asked for.
        self._batch: BatchResult | None = None
        self._index = 0

    # -- reading (any thread) -----------------------------------------------------------------
    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._done

    def cancel(self) -> bool:
        """A record handed to the producer cannot be taken back (as concurrent.futures.Future
        once running)."""
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's RecordMetadata; raises its delivery error, or TimeoutError after
        `timeout` seconds."""
        if not self._done and not self._queue.wait(self, timeout):
            raise TimeoutError(f"the record was not delivered within {timeout} s")
        if self._exc is not None:
            raise self._exc
        return self._metadata()

    def _metadata(self) -> RecordMetadata:
        md = self._md
        if md is None:
            assert self._batch is not None
            md = self._md = self._batch.metadata(self._index)
        return md

    get = result  # kafka-python's FutureRecordMetadata.get

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._done and not self._queue.wait(self, timeout):
            raise TimeoutError(f"the record was not delivered within {timeout} s")
        return self._exc

    def add_done_callback(self, fn: Callable[[DeliveryHandle], Any]) -> None:
        """`fn(handle)` once done: at once if it is, else on the loop thread."""
        if not self._done:
            with self._queue.lock:  # among adders; the loop side never takes it
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
            if not self._done:
                return
            # Done meanwhile: the loop may have looked before the append. Whoever pops a
            # callback calls it, so it runs once.
            self._run_callbacks()
            return
        _call(fn, self)

    def _run_callbacks(self) -> None:
        callbacks = self._callbacks
        while callbacks:
            try:
                fn = callbacks.pop(0)
            except IndexError:
                return
            _call(fn, self)

    # -- completing (the loop thread only: no lock on this path) ------------------------------
    def set_result(self, md: RecordMetadata) -> None:
        self._settle(md, None)

    def set_exception(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def _settle(self, md: RecordMetadata | None, exc: BaseException | None) -> None:
        if self._done:
            return
        self._md = md
        self._exc = exc
        self._done = True
        q = self._queue
        q.released_bytes += self._size  # single writer: the loop thread
        q.released += 1
        # A waiter counts itself under the lock before checking, so either it sees this
        # record done or this sees it waiting.
        if q.waiters:
            with q.lock:
                q.cond.notify_all()
        if self._on_delivery is not None:
            err = None if exc is None else (exc if isinstance(exc, KafkaError)
                                            else KafkaError(repr(exc)))
            _call(self._on_delivery, err, md)
        if self._callbacks is not None:
            self._run_callbacks()

    def __repr__(self) -> str:
        state = ("pending" if not self._done else
                 f"failed: {self._exc}" if self._exc is not None
                 else f"delivered: {self._metadata()}")
        return f"<DeliveryHandle {state}>"


class BatchResult:
    """A delivered batch's answer, shared by its records' handles."""

    __slots__ = ("base_offset", "log_append_time", "partition", "sizes", "stamps", "topic")

    def __init__(self, topic: str, partition: int, base_offset: int, log_append_time: int,
                 stamps: list[int], sizes: list[tuple[int, int]]) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.stamps = stamps
        self.sizes = sizes

    def metadata(self, i: int) -> RecordMetadata:
        ks, vs = self.sizes[i]
        return RecordMetadata(
            self.topic, self.partition, self.base_offset + i if self.base_offset >= 0 else -1,
            self.log_append_time if self.log_append_time >= 0 else self.stamps[i], ks, vs)


def complete_batch(sinks: list[Any], result: BatchResult) -> None:
    """Complete the records of a delivered batch (on the loop thread). DeliveryHandles are
    marked done in bulk: no RecordMetadata is built unless a callback or a reader wants it, and
    the queue's counters move and its waiters are woken once per batch. Other sinks (asyncio
    futures) get their RecordMetadata as usual."""
    queue: SendQueue | None = None
    released = released_bytes = 0
    to_call: list[DeliveryHandle] = []
    for i, h in enumerate(sinks):
        if type(h) is not DeliveryHandle:
            if not h.done():
                h.set_result(result.metadata(i))
            continue
        if h._done:
            continue
        h._batch = result
        h._index = i
        h._done = True
        queue = h._queue
        released += 1
        released_bytes += h._size
        if h._on_delivery is not None or h._callbacks is not None:
            to_call.append(h)
    if queue is None:
        return
    queue.released_bytes += released_bytes  # single writer: the loop thread
    queue.released += released
    if queue.waiters:
        with queue.lock:
            queue.cond.notify_all()
    for h in to_call:
        if h._on_delivery is not None:
            _call(h._on_delivery, None, h._metadata())
        if h._callbacks is not None:
            h._run_callbacks()


def _call(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("A delivery callback raised")
