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
from odradek.client.producer_batch import ProducerBatch
from odradek.client.types import TopicPartition

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
