"""A topic's max.message.bytes: a larger batch is refused with MESSAGE_TOO_LARGE, surfaced to
each client as its own error, and nothing of it reaches the log."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from .clients import Out, consume_confluent, create_topic, produce_confluent, watermarks
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

LIMIT = 1024


@pytest.fixture
def small_topic(broker: BrokerProcess) -> str:
    assert broker.bootstrap is not None
    topic = unique_topic("small")
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": str(LIMIT)})
    return topic


def big() -> bytes:
    return os.urandom(4 * LIMIT)  # incompressible, well under every client's own limit


def test_message_too_large_confluent(broker: BrokerProcess, small_topic: str) -> None:
    from confluent_kafka import KafkaError, Producer

    bs = broker.bootstrap
    results: list[tuple[KafkaError | None, int]] = []
    p = Producer({"bootstrap.servers": bs})

    def cb(err: KafkaError | None, msg: object) -> None:
        results.append((err, msg.offset()))  # type: ignore[attr-defined]

    p.produce(small_topic, big(), on_delivery=cb)
    assert p.flush(15) == 0
    p.produce(small_topic, b"small enough", on_delivery=cb)
    assert p.flush(15) == 0
    assert results[0][0] is not None and results[0][0].code() == KafkaError.MSG_SIZE_TOO_LARGE, \
        results
    assert results[1] == (None, 0), results  # the refused batch took no offset
    assert watermarks(bs, small_topic, 1) == {0: (0, 1)}  # type: ignore[arg-type]


def test_message_too_large_kafka_python(broker: BrokerProcess, small_topic: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    bs = broker.bootstrap
    p = KafkaProducer(bootstrap_servers=bs)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            p.send(small_topic, big()).get(15)
    finally:
        p.close(5)
    # kafka-python 3.0.12's idempotent producer (its default) takes any non-retriable batch
    # error as fatal and fails every later send: a new producer writes the next record.
    p = KafkaProducer(bootstrap_servers=bs)
    try:
        assert p.send(small_topic, b"small enough").get(15).offset == 0
    finally:
        p.close(5)
    assert watermarks(bs, small_topic, 1) == {0: (0, 1)}  # type: ignore[arg-type]


def test_message_too_large_aiokafka(broker: BrokerProcess, small_topic: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import MessageSizeTooLargeError

    bs = broker.bootstrap

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs)
        await p.start()
        try:
            with pytest.raises(MessageSizeTooLargeError):
                await p.send_and_wait(small_topic, big())
            assert (await p.send_and_wait(small_topic, b"small enough")).offset == 0
        finally:
            await p.stop()

    asyncio.run(run())
    assert watermarks(bs, small_topic, 1) == {0: (0, 1)}  # type: ignore[arg-type]


def test_records_larger_than_the_fetch_limits_still_arrive(broker: BrokerProcess) -> None:
    """KIP-74: the first batch of a fetch is returned whole even when it exceeds the
    partition's (and the request's) max bytes, so consumers always make progress. Records of
    ~600 KB (under the default max.message.bytes) read by consumers whose fetch limits are
    100 KB."""
    from kafka import KafkaConsumer, TopicPartition

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("large")
    create_topic(bs, topic, 1)
    values = [bytes([i]) * 600_000 for i in range(4)]
    acked = produce_confluent(bs, topic, [Out(b"k", v) for v in values])
    assert sorted(acked.values()) == [(0, i) for i in range(4)]

    c = KafkaConsumer(bootstrap_servers=bs, max_partition_fetch_bytes=100_000,
                      fetch_max_bytes=100_000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [m.value for m in c.poll(500).get(tp, [])]
    finally:
        c.close()
    assert [len(v) for v in got] == [len(v) for v in values] and got == values

    got_ck = consume_confluent(bs, topic, 1, len(values),
                               extra={"max.partition.fetch.bytes": 100_000})
    assert [r.value for r in got_ck] == values
