"""The synchronous producer: an AsyncProducer on a background loop thread, with
confluent-kafka's method names (produce, flush, the transactional calls; timeouts in seconds)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..common.loop_thread import LoopThread
from .delivery import (
    DeliveryCallback,
    DeliveryHandle,
    SendQueue,
)
from .errors import (
    KafkaError,
)
from .producer import AsyncProducer, Headers
from .types import ConsumerGroupMetadata, OffsetAndMetadata


class Producer:
    """The synchronous producer: an AsyncProducer on a background loop thread.

        p = Producer({"bootstrap.servers": "localhost:9092", "acks": "all"})
        p.send("topic", b"value", key=b"key", on_delivery=lambda err, md: ...)
        p.flush()
        p.close()

    `send` serializes the record on the caller's thread and queues it for the loop thread
    (`delivery.SendQueue`: the loop is woken once per run of sends, not per record), and
    returns a `DeliveryHandle`, a Future-like object (`result(timeout)`, `done()`,
    `exception()`, `add_done_callback`). Any number of threads may send; each thread's records
    keep their order within a partition. Records sent and not yet delivered are bounded by
    `buffer.memory` bytes and `queue.buffering.max.messages` records: a send beyond that blocks
    until earlier records are delivered, at most `max.block.ms`, then raises KafkaTimeoutError.

    Delivery callbacks (`on_delivery=` of send, `on_delivery`/`callback` of produce) run on the
    producer's loop thread as each batch is acknowledged, once per record, before `flush()`
    returns: keep them short. Sending from a callback works while the buffer has room (it
    raises instead of blocking); flush/close from a callback raise RuntimeError.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._runner = LoopThread("odradek-producer")
        try:
            self._p: AsyncProducer = self._runner.run(self._create(config, kwargs))
        except BaseException:
            self._runner.stop()
            raise
        cfg = self._p.config
        self._queue = SendQueue(int(cfg["buffer.memory"]),
                                int(cfg["queue.buffering.max.messages"]), self._p.max_block)
        self._make_record = self._p._make_record
        self._call = self._runner.loop.call_soon_threadsafe

    @staticmethod
    async def _create(config: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> AsyncProducer:
        p = AsyncProducer(config, **kwargs)
        try:
            return await p.start()
        except BaseException:
            await p.client.close()
            raise

    @property
    def config(self) -> dict[str, Any]:
        return self._p.config

    def send(self, topic: str, value: Any = None, key: Any = None, *,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: Headers | None = None, on_delivery: DeliveryCallback | None = None
             ) -> DeliveryHandle:
        """Queue one record; returns its DeliveryHandle. Serialization and size errors, and a
        buffer still full after max.block.ms, raise here; delivery errors (including metadata
        not found within max.block.ms) come through the handle and `on_delivery(err, md)`."""
        rec = self._make_record(topic, value, key, partition, timestamp_ms, headers)
        handle = DeliveryHandle(self._queue, rec.size, on_delivery)
        if self._queue.put((rec, handle), rec.size, not self._runner.in_loop_thread):
            self._call(self._hand_over)
        return handle

    def _hand_over(self) -> None:
        """On the loop: every queued record joins the accumulator, in queue order."""
        enqueue = self._p.enqueue
        closed = self._p.closed
        for rec, handle in self._queue.take():
            if closed:  # sent while close() ran
                handle.set_exception(KafkaError("producer closed before the record was sent"))
                continue
            try:
                enqueue(rec, None, handle)
            except BaseException as exc:
                handle.set_exception(exc)

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: DeliveryCallback | None = None, timestamp: int = 0,
                headers: Headers | None = None,
                callback: DeliveryCallback | None = None) -> None:
        """confluent-kafka's signature (partition -1 and timestamp 0 mean unset; `callback` is
        its alias of `on_delivery`)."""
        self.send(topic, value, key, partition=None if partition < 0 else partition,
                  timestamp_ms=timestamp or None, headers=headers,
                  on_delivery=on_delivery or callback)

    def flush(self, timeout: float | None = None) -> int:
        """Deliver everything sent before the call (or wait `timeout` seconds); their delivery
        callbacks have run when it returns. Returns the number of records undelivered then,
        counting those other threads (or callbacks) sent meanwhile."""
        left = self._runner.run(self._p.flush(timeout))
        return max(left, self._queue.outstanding)

    def partitions_for(self, topic: str) -> list[int]:
        return self._runner.run(self._p.partitions_for(topic))

    # -- transactions (confluent-kafka's names; timeouts in seconds) ------------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        self._runner.run(self._p.init_transactions(timeout))

    def begin_transaction(self) -> None:
        self._runner.run(self._on_loop(self._p.begin_transaction))

    def send_offsets_to_transaction(
            self, offsets: Mapping[Any, int | OffsetAndMetadata] | Sequence[Any],
            group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None) -> None:
        self._runner.run(self._p.send_offsets_to_transaction(offsets, group_metadata, timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Records sent before the call are delivered first (their callbacks have run)."""
        self._runner.run(self._p.commit_transaction(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._runner.run(self._p.abort_transaction(timeout))

    @staticmethod
    async def _on_loop(fn: Callable[[], Any]) -> Any:
        return fn()

    def __len__(self) -> int:
        """Records sent and not yet delivered or failed (confluent-kafka's len(producer))."""
        return self._queue.outstanding

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered (waiting at most `timeout` seconds), then stop; what could
        not be delivered fails. Closing twice is harmless."""
        if self._queue.closed is not None:
            return
        try:
            self._runner.run(self._p.close(timeout))
        finally:
            self._queue.close(KafkaError("the producer is closed"))
            self._runner.stop()
            # Records queued while close() ran, whose hand-over the stopped loop never ran.
            for _, handle in self._queue.take():
                handle.set_exception(KafkaError("producer closed before the record was sent"))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
