"""The idempotent producer's retries across a new producer id (odradek.client.accumulator,
idempotence): a batch sent under the old id, its outcome unknown, is dropped as Kafka's Sender
drops it ("the producer id changed ... This batch will be dropped"), not resent under the new
id, which would append it a second time if the broker had written it (a duplicate that
`odradek sim --seed 10 --duration 30 --ops all --op-rate 3` found). A batch the broker refused
(UNKNOWN_PRODUCER_ID) was not written and is resent under the new id."""

from __future__ import annotations

import asyncio
from collections import deque

from kio.schema.errors import ErrorCode

from odradek.client.accumulator import RecordAccumulator
from odradek.client.errors import KafkaError
from odradek.client.idempotence import IdempotenceState
from odradek.client.producer_batch import PendingRecord, ProducerBatch
from odradek.client.sender import Sender
from odradek.client.types import TopicPartition
from odradek.protocol.compression import Codec

TP = TopicPartition("events", 0)


def accumulator(idem: IdempotenceState) -> RecordAccumulator:
    return RecordAccumulator(None, None, idem, None, lambda: None,  # type: ignore[arg-type]
                             batch_size=16384, linger=0.0, delivery_timeout=60.0,
                             max_block=1.0, buffer_memory=1 << 20, retry_backoff=0.1)


def test_a_retried_batch_of_an_older_producer_id_is_dropped_not_resent() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        idem = IdempotenceState(True, False, True)
        idem.set_producer_id(0, 0)
        acc = accumulator(idem)
        sent, refused, later = (ProducerBatch(TP, 0.0, 60.0, loop) for _ in range(3))
        for b in (sent, refused, later):
            b.count = 1
            b.futures.append(loop.create_future())
        acc.batches[TP] = deque([sent, refused])
        assert acc.drain([TP], 1 << 20) == [sent]
        assert acc.drain([TP], 1 << 20) == [refused]
        assert [(b.producer_id, b.base_sequence) for b in (sent, refused)] == [(0, 0), (0, 1)]
        # both come back for a retry: `sent` met a network error (it may have been written),
        # `refused` UNKNOWN_PRODUCER_ID (the sender clears its sequence: not written)
        acc.state(TP).inflight.clear()
        refused.base_sequence = -1
        acc.batches[TP] = deque([sent, refused, later])
        idem.set_producer_id(7, 0)  # InitProducerId: a new producer id
        assert acc.drain([TP], 1 << 20) == []
        error = sent.futures[0].exception()
        assert isinstance(error, KafkaError)
        assert error.code == ErrorCode.out_of_order_sequence_number
        assert "producer id changed from 0 to 7" in str(error)
        assert acc.drain([TP], 1 << 20) == [refused]
        assert acc.drain([TP], 1 << 20) == [later]
        assert [(b.producer_id, b.base_sequence) for b in (refused, later)] == [(7, 0), (7, 1)]
        assert not refused.futures[0].done() and not later.futures[0].done()

    asyncio.run(main())


# -- the Sender's answers: what an attempt's outcome allows ----------------------------------------

class MetadataRefreshes:
    """The one thing the Sender asks of its client while completing batches."""

    def __init__(self) -> None:
        self.requested = 0

    def request_update(self) -> None:
        self.requested += 1


def sender(loop: asyncio.AbstractEventLoop, idem: IdempotenceState,
           acc: RecordAccumulator) -> Sender:
    s = Sender(MetadataRefreshes(), acc, idem, None, None,  # type: ignore[arg-type]
               acks=-1, retries=2147483647, max_in_flight=5, max_request_size=1 << 20,
               request_timeout_ms=5000, retry_backoff=0.0, delivery_timeout=60.0,
               codec=Codec.NONE, transactional_id=None)
    s.loop = loop
    return s


def batches(loop: asyncio.AbstractEventLoop, n: int) -> list[ProducerBatch]:
    out = []
    for _ in range(n):
        b = ProducerBatch(TP, loop.time(), loop.time() + 60.0, loop)
        b.append(PendingRecord(TP.topic, TP.partition, None, b"v", [], 0, 1),
                 loop.create_future(), 16384)
        out.append(b)
    return out


def drain_all(acc: RecordAccumulator) -> list[ProducerBatch]:
    out: list[ProducerBatch] = []
    while acc.batches.get(TP):
        out += acc.drain([TP], 1 << 20)
    return out


NOT_LEADER = int(ErrorCode.not_leader_or_follower)
OUT_OF_ORDER = int(ErrorCode.out_of_order_sequence_number)
UNKNOWN_PRODUCER = int(ErrorCode.unknown_producer_id)


def producer_with_pid(loop: asyncio.AbstractEventLoop, pid: int
                      ) -> tuple[IdempotenceState, RecordAccumulator, Sender]:
    """An idempotent producer's state, accumulator and sender, its InitProducerId answered
    with `pid` (epoch 0)."""
    idem = IdempotenceState(True, False, True)
    idem.set_producer_id(pid, 0)
    idem.need_pid = False
    acc = accumulator(idem)
    return idem, acc, sender(loop, idem, acc)


def test_a_batch_an_earlier_attempt_may_have_written_fails_not_resent_under_a_new_id() -> None:
    """The simulator's case: two batches appended by the old leader, which restarts and
    answers NOT_LEADER_OR_FOLLOWER; the new leader lost their batch metadata and refuses both
    retries with OUT_OF_ORDER_SEQUENCE_NUMBER. Resent under the new producer id at sequence 0,
    the second was appended twice."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        idem, acc, s = producer_with_pid(loop, 1000)
        first, second = batches(loop, 2)
        acc.batches[TP] = deque([first, second])
        assert drain_all(acc) == [first, second]
        for b in (first, second):  # the old leader appended them, then lost its leadership
            s._batch_result(b, NOT_LEADER, -1, -1, None)
        assert drain_all(acc) == [first, second]  # retried with their sequences
        assert [(b.producer_id, b.base_sequence) for b in (first, second)] == [(1000, 0),
                                                                               (1000, 1)]
        s._batch_result(first, OUT_OF_ORDER, -1, -1, "0 (incoming), 1 (current end sequence)")
        s._batch_result(second, OUT_OF_ORDER, -1, -1, "1 (incoming), 1 (current end sequence)")
        for b in (first, second):
            error = b.futures[0].exception()
            assert isinstance(error, KafkaError)
            assert error.code == ErrorCode.out_of_order_sequence_number
        assert "may have been written" in str(second.futures[0].exception())
        assert idem.need_pid
        idem.set_producer_id(1001, 0)
        assert drain_all(acc) == [] and not acc.state(TP).failed

    asyncio.run(main())


def test_a_batch_refused_on_every_attempt_is_resent_under_the_new_id() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        idem, acc, s = producer_with_pid(loop, 1000)
        first, second = batches(loop, 2)
        acc.batches[TP] = deque([first, second])
        assert drain_all(acc) == [first, second]
        s._batch_result(first, int(ErrorCode.message_too_large), -1, -1, None)  # a gap
        s._batch_result(second, OUT_OF_ORDER, -1, -1, None)  # refused behind it: not written
        assert isinstance(first.futures[0].exception(), KafkaError)
        assert not second.futures[0].done()
        idem.set_producer_id(1001, 0)
        assert drain_all(acc) == [second]
        assert (second.producer_id, second.base_sequence) == (1001, 0)

    asyncio.run(main())


def test_unknown_producer_id_resent_under_a_new_id_only_when_the_log_start_shows_why() -> None:
    """Kafka's canRetry: UNKNOWN_PRODUCER_ID with no log start offset (-1) is retried as it
    is; with every acknowledged record of the partition below the log start offset (retention
    removed the producer's state) the batch starts again under a new id; otherwise a batch that
    may have been written fails."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        idem, acc, s = producer_with_pid(loop, 1000)
        acked, unknown_start, removed, kept = batches(loop, 4)
        acc.batches[TP] = deque([acked])
        assert drain_all(acc) == [acked]
        s._batch_result(acked, int(ErrorCode.none), 40, -1, None)  # last acked offset 40
        acc.batches[TP] = deque([unknown_start, removed, kept])
        assert drain_all(acc) == [unknown_start, removed, kept]
        for b in (unknown_start, removed, kept):
            s._batch_result(b, NOT_LEADER, -1, -1, None)  # each may have been written
        assert drain_all(acc) == [unknown_start, removed, kept]
        s._batch_result(unknown_start, UNKNOWN_PRODUCER, -1, -1, None, -1)
        assert not idem.need_pid and unknown_start.base_sequence == 1
        s._batch_result(kept, UNKNOWN_PRODUCER, -1, -1, None, 41)  # offset 40 below 41
        assert not kept.futures[0].done() and kept.base_sequence == -1 and idem.need_pid
        s._batch_result(removed, UNKNOWN_PRODUCER, -1, -1, None, 40)  # offset 40 still there
        error = removed.futures[0].exception()
        assert isinstance(error, KafkaError) and error.code == ErrorCode.unknown_producer_id

    asyncio.run(main())
