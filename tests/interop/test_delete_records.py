"""DeleteRecords and compacted-topic key validation seen by real clients, on an in-process
3-broker cluster: confluent-kafka's AdminClient.delete_records (low watermarks, -1 for the
high watermark, OFFSET_OUT_OF_RANGE beyond it), kafka-python's KafkaAdminClient.delete_records
and aiokafka's AIOKafkaAdminClient.delete_records; consumers from the beginning start at the
new log start offset; a keyless record to a compacted topic is a delivery error INVALID_RECORD
for confluent-kafka (the whole batch fails) and for kafka-python."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from odradek.cluster import Cluster

from .clients import Out, consume_confluent, produce_confluent

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(3, data_dir=tmp_path_factory.mktemp("delete-records-interop"),
                overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield c
    finally:
        c.stop()


def topic_with(cluster: Cluster, n: int, config: dict[str, str] | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    from .clients import wait_for_leaders

    name = f"dri-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 3, config=config or {})])[name].result(15)
    wait_for_leaders(cluster.bootstrap_servers, name, 1)
    if n:
        produce_confluent(cluster.bootstrap_servers, name,
                          [Out(b"k%d" % i, b"v%d" % i) for i in range(n)],
                          extra={"acks": "all"})
    return name


def log_starts(cluster: Cluster, topic: str) -> dict[int, int]:
    async def read() -> dict[int, int]:
        return {b: broker.replica_manager.partitions[(topic, 0)].log_start_offset
                for b, broker in cluster.brokers.items()}
    return cluster.run(read())


def test_confluent_kafka_delete_records(cluster: Cluster) -> None:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = topic_with(cluster, 30)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, 0, 12)], operation_timeout=20)
    deleted = next(iter(futures.values())).result(30)
    assert deleted.low_watermark == 12
    assert log_starts(cluster, topic) == {0: 12, 1: 12, 2: 12}
    got = consume_confluent(cluster.bootstrap_servers, topic, 1, 18)
    assert [r.offset for r in got] == list(range(12, 30))
    # beyond the high watermark
    fut = next(iter(admin.delete_records([TopicPartition(topic, 0, 31)]).values()))
    with pytest.raises(KafkaException) as info:
        fut.result(30)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # OFFSET_END (-1): everything up to the high watermark
    fut = next(iter(admin.delete_records([TopicPartition(topic, 0, -1)]).values()))
    assert fut.result(30).low_watermark == 30


def test_kafka_python_delete_records(cluster: Cluster) -> None:
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    topic = topic_with(cluster, 20)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        result = admin.delete_records({TopicPartition(topic, 0): 7}, timeout_ms=20000)
    finally:
        admin.close()
    assert result[TopicPartition(topic, 0)]["low_watermark"] == 7
    assert log_starts(cluster, topic) == {0: 7, 1: 7, 2: 7}


def test_aiokafka_delete_records(cluster: Cluster) -> None:
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.records_to_delete import RecordsToDelete
    from aiokafka.structs import TopicPartition

    topic = topic_with(cluster, 15)

    async def delete() -> dict[TopicPartition, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            return await admin.delete_records(
                {TopicPartition(topic, 0): RecordsToDelete(before_offset=11)}, timeout_ms=20000)
        finally:
            await admin.close()
    assert asyncio.run(delete()) == {TopicPartition(topic, 0): 11}
    assert log_starts(cluster, topic) == {0: 11, 1: 11, 2: 11}


def test_confluent_kafka_producer_gets_invalid_record_for_a_keyless_record(
        cluster: Cluster) -> None:
    from confluent_kafka import KafkaError, Producer

    topic = topic_with(cluster, 0, {"cleanup.policy": "compact"})
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0})
    # one batch: the keyless record fails it whole, the keyed one with it (KIP-467)
    p.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.produce(topic, key=b"k", value=b"keyed",
              on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    assert errors and all(e is not None and e.code() == KafkaError.INVALID_RECORD
                          for e in errors), errors
    # a keyed record alone goes through
    errors.clear()
    p.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    assert errors == [None]


def test_kafka_python_producer_gets_invalid_record_for_a_keyless_record(
        cluster: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    topic = topic_with(cluster, 0, {"cleanup.policy": "compact"})
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, retries=0)
    try:
        fut = p.send(topic, value=b"no key")
        with pytest.raises(InvalidRecordError):
            fut.get(30)
    finally:
        p.close()
