"""The synchronous producer's hand-over queue and delivery handles (S-7.1,
odradek.client.delivery): the buffer bounds, blocking then failing after max.block.ms, the
one-wakeup-per-run signal, and handles completed once with their callbacks."""

from __future__ import annotations

import threading
import time

import pytest

from odradek.client.delivery import BatchResult, DeliveryHandle, SendQueue, complete_batch, fits
from odradek.client.errors import KafkaError, KafkaTimeoutError
from odradek.client.types import RecordMetadata


def md(offset: int) -> RecordMetadata:
    return RecordMetadata("t", 0, offset, 0, -1, 3)


def wait_until(pred: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


@pytest.mark.parametrize(("bytes_out", "records_out", "size", "expected"), [
    (0, 0, 10_000, True),      # nothing outstanding: always fits
    (900, 9, 100, True),       # exactly at buffer.memory
    (901, 9, 100, False),      # one byte over
    (0, 9, 10, True),          # under the record bound
    (0, 10, 10, False),        # at the record bound
])
def test_fits_within_the_byte_and_record_bounds(bytes_out: int, records_out: int, size: int,
                                                 expected: bool) -> None:
    assert fits(bytes_out, records_out, size, 1000, 10) is expected


def test_put_signals_only_when_the_queue_was_empty_and_take_keeps_order() -> None:
    q = SendQueue(10_000, 100, 1.0)
    assert q.put("a", 10) is True
    assert q.put("b", 10) is False
    assert q.put("c", 10) is False
    assert q.take() == ["a", "b", "c"]
    assert q.put("d", 10) is True  # empty again: a new wakeup
    assert q.take() == ["d"]
    assert q.outstanding == 4  # taken is not delivered


def test_a_full_buffer_blocks_for_max_block_then_raises() -> None:
    q = SendQueue(100, 1000, 0.3)
    q.put("a", 60)
    with pytest.raises(KafkaTimeoutError, match="max blocking time 300 ms"):
        q.put("b", 60)
    assert q.outstanding == 1 and q.take() == ["a"]


def test_the_record_bound_blocks_too() -> None:
    q = SendQueue(1 << 20, 3, 0.2)
    for i in range(3):
        q.put(i, 1)
    with pytest.raises(KafkaTimeoutError, match=r"queue\.buffering\.max\.messages=3"):
        q.put(3, 1)


def test_a_blocked_send_goes_on_when_a_delivery_frees_room() -> None:
    q = SendQueue(100, 1000, 30.0)
    first = DeliveryHandle(q, 60)
    q.put(first, 60)
    done = threading.Event()
    errors: list[BaseException] = []

    def sender() -> None:
        try:
            q.put("second", 60)
        except BaseException as exc:
            errors.append(exc)
        done.set()

    t = threading.Thread(target=sender)
    t.start()
    wait_until(lambda: q.waiters == 1)
    assert not done.is_set()  # blocked while the first record is undelivered
    first.set_result(md(0))
    assert done.wait(10), "the blocked send was not woken by the delivery"
    t.join(5)
    assert not errors and q.take() == [first, "second"]


def test_no_blocking_on_the_loop_thread_and_close_releases_blocked_senders() -> None:
    q = SendQueue(100, 1000, 30.0)
    q.put("a", 80)
    with pytest.raises(KafkaTimeoutError, match="delivery callback cannot wait"):
        q.put("b", 80, can_block=False)
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(errors, q.put, "c", 80))
    t.start()
    wait_until(lambda: q.waiters == 1)
    q.close(KafkaError("the producer is closed"))
    t.join(10)
    assert len(errors) == 1 and "closed" in str(errors[0])


def _catch(errors: list[BaseException], fn: object, *args: object) -> None:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as exc:
        errors.append(exc)


def test_rejected_sizes() -> None:
    with pytest.raises(ValueError):
        SendQueue(0, 10, 1.0)


def test_handle_result_callbacks_once_and_release() -> None:
    q = SendQueue(1000, 10, 1.0)
    calls: list[tuple[KafkaError | None, RecordMetadata | None]] = []
    h = DeliveryHandle(q, 40, lambda err, m: calls.append((err, m)))
    q.put(h, 40)
    seen: list[DeliveryHandle] = []
    h.add_done_callback(seen.append)  # before completion
    assert not h.done() and h.running() and not h.cancel()
    with pytest.raises(TimeoutError):
        h.result(0.05)
    h.set_result(md(7))
    h.set_result(md(8))  # a second completion is ignored
    h.set_exception(KafkaError("late"))
    assert h.done() and h.result() == md(7) and h.get(1) == md(7) and h.exception() is None
    assert calls == [(None, md(7))] and seen == [h]
    h.add_done_callback(seen.append)  # after completion: at once
    assert seen == [h, h]
    assert q.outstanding == 0 and q.released_bytes == 40


def test_handle_failure_reaches_result_and_callback() -> None:
    q = SendQueue(1000, 10, 1.0)
    calls: list[tuple[KafkaError | None, RecordMetadata | None]] = []
    h = DeliveryHandle(q, 10, lambda err, m: calls.append((err, m)))
    q.put(h, 10)
    h.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        h.result()
    assert isinstance(h.exception(), ValueError)
    err, m = calls[0]
    assert isinstance(err, KafkaError) and "boom" in str(err) and m is None


def test_a_raising_callback_is_logged_not_propagated(caplog: pytest.LogCaptureFixture) -> None:
    q = SendQueue(1000, 10, 1.0)

    def bad(err: KafkaError | None, m: RecordMetadata | None) -> None:
        raise RuntimeError("user bug")

    h = DeliveryHandle(q, 10, bad)
    h.set_result(md(1))
    assert h.result() == md(1)
    assert "A delivery callback raised" in caplog.text


def test_result_waits_for_completion_from_another_thread() -> None:
    q = SendQueue(1000, 100, 1.0)
    handles = [DeliveryHandle(q, 1) for _ in range(50)]
    for h in handles:
        q.put(h, 1)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.extend(h.result(20).offset for h in handles))
    waiter.start()
    for i, h in enumerate(handles):
        h.set_result(md(i))
        if i % 10 == 0:
            time.sleep(0.002)
    waiter.join(20)
    assert got == list(range(50))


def test_callbacks_added_while_completing_run_exactly_once() -> None:
    """add_done_callback racing with completion on another thread: never lost, never twice."""
    q = SendQueue(1 << 20, 1 << 20, 1.0)
    for _ in range(200):
        h = DeliveryHandle(q, 1)
        hits: list[int] = []
        go = threading.Barrier(2)

        def complete(h: DeliveryHandle = h, go: threading.Barrier = go) -> None:
            go.wait()
            h.set_result(md(0))

        t = threading.Thread(target=complete)
        t.start()
        go.wait()
        for i in range(5):
            h.add_done_callback(lambda _h, i=i, hits=hits: hits.append(i))
        t.join(5)
        assert sorted(hits) == [0, 1, 2, 3, 4]


def test_complete_batch_marks_handles_in_bulk_and_builds_metadata_lazily() -> None:
    import concurrent.futures

    q = SendQueue(10_000, 100, 1.0)
    calls: list[tuple[KafkaError | None, RecordMetadata | None]] = []
    plain = DeliveryHandle(q, 10)
    with_cb = DeliveryHandle(q, 20, lambda err, m: calls.append((err, m)))
    already = DeliveryHandle(q, 30)
    other: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
    for h, size in ((plain, 10), (with_cb, 20), (already, 30)):
        q.put(h, size)
    already.set_exception(KafkaError("failed before"))
    result = BatchResult("t", 2, 100, -1, [1000, 1001, 1002, 1003], [(1, 5), (-1, 6), (2, 7),
                                                                       (3, 8)])
    complete_batch([plain, with_cb, already, other], result)
    assert plain.done() and plain._md is None  # nothing built yet
    assert plain.result() == RecordMetadata("t", 2, 100, 1000, 1, 5)
    assert calls == [(None, RecordMetadata("t", 2, 101, 1001, -1, 6))]
    assert isinstance(already.exception(), KafkaError)  # not overwritten
    assert other.result(0) == RecordMetadata("t", 2, 103, 1003, 3, 8)
    assert q.outstanding == 0 and q.released_bytes == 60
    # log append time replaces the create time; an unknown offset stays -1
    lat = BatchResult("t", 0, -1, 5555, [1], [(0, 0)])
    h = DeliveryHandle(q, 1)
    complete_batch([h], lat)
    assert h.result() == RecordMetadata("t", 0, -1, 5555, 0, 0)
