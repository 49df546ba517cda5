"""Offsets by timestamp (ListOffsets with a timestamp) through confluent-kafka's and
kafka-python's `offsets_for_times`, on records written by the other client with explicit
timestamps spaced apart: one batch per record in partition 0, all records in ONE compressed batch
in partition 1 (the answer must then be the record inside the batch, not the batch's start)."""

from __future__ import annotations

import time
import uuid

import pytest

from .clients import Out, batch_headers, create_topic
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

N = 8
STEP_MS = 1000


def produce_spaced(bootstrap: str, topic: str, producer: str, base_ts: int) -> None:
    """Partition 0: N separate batches; partition 1: N records in one gzip batch."""
    records = [Out(b"k", f"r{i}".encode(), timestamp_ms=base_ts + i * STEP_MS) for i in range(N)]
    if producer == "confluent":
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip",
                      "linger.ms": 200})
        for i, r in enumerate(records):  # one flush per record: one batch each
            p.produce(topic, key=r.key, value=r.value, partition=0, timestamp=r.timestamp_ms)
            p.flush(10)
            assert len(p) == 0, f"record {i} not delivered"
        for r in records:  # lingered together: one batch
            p.produce(topic, key=r.key, value=r.value, partition=1, timestamp=r.timestamp_ms)
        assert p.flush(10) == 0
    else:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=200)
        try:
            for r in records:
                p.send(topic, key=r.key, value=r.value, partition=0,
                       timestamp_ms=r.timestamp_ms).get(10)
            futures = [p.send(topic, key=r.key, value=r.value, partition=1,
                              timestamp_ms=r.timestamp_ms) for r in records]
            p.flush(10)
            offsets = [f.get(10).offset for f in futures]
            assert offsets == list(range(N))
        finally:
            p.close(5)


def lookups(base_ts: int) -> list[tuple[int, int | None]]:
    """(timestamp to look up, the expected offset or None for 'no such record')."""
    out: list[tuple[int, int | None]] = [(base_ts - 10 * STEP_MS, 0), (base_ts, 0)]
    for i in range(1, N):
        out.append((base_ts + i * STEP_MS - STEP_MS // 2, i))  # between i-1 and i
        out.append((base_ts + i * STEP_MS, i))  # exactly i
    out.append((base_ts + (N - 1) * STEP_MS + 1, None))  # after the last
    return out


@pytest.mark.parametrize(("producer", "looker"), [("kafka-python", "confluent"),
                                                  ("confluent", "kafka-python")])
def test_offsets_for_times(broker: BrokerProcess, producer: str, looker: str) -> None:
    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("times")
    create_topic(bs, topic, 2)
    base_ts = (int(time.time()) - 3600) * 1000  # an hour ago, whole seconds
    produce_spaced(bs, topic, producer, base_ts)
    assert broker.log_dir is not None
    layout = [[h["count"] for h in batch_headers(broker.log_dir, topic, p)] for p in (0, 1)]
    assert layout == [[1] * N, [N]], f"records per stored batch: {layout}"
    cases = lookups(base_ts)

    got: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    if looker == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bs, "group.id": f"oft-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False})
        try:
            for ts, _ in cases:  # one query per timestamp, both partitions in it
                res = c.offsets_for_times([TopicPartition(topic, p, ts) for p in (0, 1)],
                                          timeout=10)
                for r in res:
                    assert r.error is None, r.error
                    # librdkafka: -1 (OFFSET_END) when no record has a timestamp >= ts
                    got[(r.partition, ts)] = (None if r.offset == -1 else r.offset, None)
        finally:
            c.close()
    else:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=bs)
        try:
            for partition in (0, 1):
                tp = TopicPartition(topic, partition)
                for ts, _ in cases:  # one query per timestamp: a dict holds one per partition
                    r = c.offsets_for_times({tp: ts})[tp]
                    got[(partition, ts)] = (None, None) if r is None else (r.offset, r.timestamp)
        finally:
            c.close()

    wrong = []
    for partition in (0, 1):
        for ts, expected in cases:
            offset, found_ts = got[(partition, ts)]
            if offset != expected:
                wrong.append(f"p{partition} ts=base{ts - base_ts:+d}: offset {offset}, "
                             f"expected {expected}")
            elif (found_ts is not None and expected is not None
                  and found_ts != base_ts + expected * STEP_MS):
                # kafka-python reports the found record's timestamp: it must be the record's own
                wrong.append(f"p{partition} ts=base{ts - base_ts:+d}: timestamp "
                             f"{found_ts - base_ts:+d}, expected {expected * STEP_MS:+d}")
    assert not wrong, "\n".join(wrong)


def test_kafka_python_pinned_to_0_10_0_lists_offsets_with_v0(broker: BrokerProcess) -> None:
    """kafka-python told the broker is 0.10.0 (`api_version=(0, 10, 0)`) sends ListOffsets v0,
    the only version it believes such a broker has; Kafka 2.8 serves v0, so the earliest and
    latest offsets come back (before, odradek closed the connection)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    assert BROKER_API_VERSIONS[(0, 10, 0)][2] == (0, 0)  # ListOffsets v0 only
    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("v0")
    create_topic(bs, topic, 1)
    p = KafkaProducer(bootstrap_servers=bs)
    try:
        for i in range(7):
            p.send(topic, f"r{i}".encode(), partition=0).get(10)
    finally:
        p.close(5)
    c = KafkaConsumer(bootstrap_servers=bs, api_version=(0, 10, 0), enable_auto_commit=False,
                      request_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        assert c.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 7}
    finally:
        c.close()


@pytest.mark.parametrize("consumer", ["confluent", "kafka-python", "aiokafka"])
def test_fetch_from_the_middle_of_a_compressed_batch(broker: BrokerProcess,
                                                    consumer: str) -> None:
    """Fetching at an offset inside a stored compressed batch: the broker answers with the
    batch holding it; the consumer's first record is that offset, not the batch's start nor
    the next batch."""
    bs = broker.bootstrap
    assert bs is not None and broker.log_dir is not None
    topic = unique_topic(f"midbatch-{consumer}")
    create_topic(bs, topic, 1)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "compression.type": "zstd", "linger.ms": 100})
    for i in range(20):  # two batches of 10
        p.produce(topic, key=b"k", value=f"r{i}".encode(), partition=0)
        if i == 9:
            assert p.flush(10) == 0
    assert p.flush(10) == 0
    assert [(h["base_offset"], h["count"]) for h in batch_headers(broker.log_dir, topic, 0)] \
        == [(0, 10), (10, 10)]
    start = 6
    if consumer == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bs, "group.id": f"mid-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(topic, 0, start)])
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 20 - start and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None:
                    assert m.error() is None, m.error()
                    got.append((m.offset(), m.value()))
        finally:
            c.close()
    elif consumer == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        kc = KafkaConsumer(bootstrap_servers=bs)
        try:
            tp = TopicPartition(topic, 0)
            kc.assign([tp])
            kc.seek(tp, start)
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 20 - start and time.monotonic() < deadline:
                got += [(m.offset, m.value) for m in kc.poll(500).get(tp, [])]
        finally:
            kc.close()
    else:
        import asyncio

        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> list[tuple[int, bytes]]:
            ac = AIOKafkaConsumer(bootstrap_servers=bs)
            await ac.start()
            try:
                tp = TopicPartition(topic, 0)
                ac.assign([tp])
                ac.seek(tp, start)
                out: list[tuple[int, bytes]] = []
                deadline = time.monotonic() + 15
                while len(out) < 20 - start and time.monotonic() < deadline:
                    batches = await ac.getmany(timeout_ms=500)
                    out += [(m.offset, m.value) for m in batches.get(tp, [])]
                return out
            finally:
                await ac.stop()

        got = asyncio.run(run())
    assert got == [(i, f"r{i}".encode()) for i in range(start, 20)]
