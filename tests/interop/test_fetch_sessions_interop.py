"""Fetch sessions (KIP-227) with real clients: kafka-python 3.0.12 fetches through incremental
sessions (its FetchSessionHandler); with produces interleaved across several partitions it reads
every record once, in order. librdkafka and aiokafka fetch sessionless (session id 0, epoch
-1) and keep working (their consumers are in the other interop tests)."""

from __future__ import annotations

import time

import pytest

from .clients import create_topic
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PARTITIONS = 4
ROUNDS = 12


def test_kafka_python_reads_through_an_incremental_session(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("sessions-kp")
    create_topic(bs, topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=bs, linger_ms=0)
    consumer = KafkaConsumer(bootstrap_servers=bs, fetch_max_wait_ms=100)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    epochs: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()

        def poll() -> None:
            for tp, msgs in consumer.poll(200).items():
                got[tp.partition].extend((m.offset, m.value) for m in msgs)
            handlers = consumer._fetcher._session_handlers  # kafka-python's own sessions
            epochs.extend(h.next_metadata.epoch for h in handlers.values())

        for i in range(ROUNDS):
            # produce to one or two partitions only, so the others stay out of the answers
            for p in {i % PARTITIONS, (i * 3) % PARTITIONS}:
                value = b"r%d-p%d" % (i, p)
                producer.send(topic, value=value, partition=p).get(10)
                sent[p].append(value)
            poll()
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < sum(map(len, sent.values())) \
                and time.monotonic() < deadline:
            poll()
        for _ in range(3):
            poll()  # nothing more may come (no duplicates)
    finally:
        consumer.close()
        producer.close(5)
    for p in range(PARTITIONS):
        assert [v for _, v in got[p]] == sent[p], p
        assert [o for o, _ in got[p]] == list(range(len(sent[p]))), p
    # the session went on past its first incremental epochs (no reset to full fetches)
    assert max(epochs) >= ROUNDS, epochs
