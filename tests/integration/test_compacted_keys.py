"""Compacted topics refuse records without a key (Kafka's LogValidator.validateKey, KIP-467) on
an in-process 3-broker cluster: the whole batch fails with INVALID_RECORD, Produce v8+ names
the keyless records (record_errors) and says why (error_message), nothing is appended; a
topic with cleanup.policy=compact,delete is checked too, a delete topic is not, and the
coordinators' own writes to the compacted __consumer_offsets still go through."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import Admin, Consumer, KafkaError, Producer, TopicPartition
from odradek.cluster import Cluster
from odradek.protocol.records import build_batch
from tests.integration.broker_harness import produce
from tests.integration.cluster_fixtures import module_admin, module_cluster
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "compacted-keys", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


def new_topic(admin: Admin, policy: str) -> str:
    name = f"ck-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, 1, 3, {"cleanup.policy": policy})
    admin.wait_for_topics([name])
    return name


def leader_of(cluster: Cluster, topic: str) -> int:
    return next(b for b, broker in cluster.brokers.items()
                if (p := broker.replica_manager.partitions.get((topic, 0))) and p.is_leader)


def send(cluster: Cluster, topic: str, records: list[tuple[bytes | None, bytes | None]],
         version: int, broker: int | None = None) -> Any:
    target = leader_of(cluster, topic) if broker is None else broker

    async def request() -> Any:
        c = await WireClient.connect("127.0.0.1", cluster.c.ports[target])
        try:
            r = await c.request(produce(topic, 0, build_batch(records), version=version))
        finally:
            await c.close()
        return r.responses[0].partition_responses[0]
    return cluster.run(request())


def log_end(cluster: Cluster, topic: str) -> int:
    async def read() -> int:
        return cluster.brokers[leader_of(cluster, topic)].replica_manager.partitions[
            (topic, 0)].log_end_offset
    return cluster.run(read())


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_keyless_record_fails_its_batch_with_the_record_errors(
        cluster: Cluster, admin: Admin, policy: str) -> None:
    topic = new_topic(admin, policy)
    assert send(cluster, topic, [(b"k", b"v")], 9).error_code == ErrorCode.none
    part = send(cluster, topic, [(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")], 9)
    assert part.error_code == ErrorCode.invalid_record
    assert part.error_message == "One or more records have been rejected"
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, why), (3, why)]
    assert part.base_offset == -1
    assert log_end(cluster, topic) == 1  # nothing of the batch was appended
    # before v8: the error code only
    old = send(cluster, topic, [(None, b"x")], 7)
    assert old.error_code == ErrorCode.invalid_record
    assert log_end(cluster, topic) == 1
    # a follower answers NOT_LEADER_OR_FOLLOWER first, as Kafka's leader check comes first
    follower = next(b for b in range(3) if b != leader_of(cluster, topic))
    assert send(cluster, topic, [(None, b"x")], 9, broker=follower).error_code == \
        ErrorCode.not_leader_or_follower


def test_delete_topics_take_keyless_records(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, "delete")
    part = send(cluster, topic, [(None, b"1"), (None, b"2")], 9)
    assert part.error_code == ErrorCode.none and list(part.record_errors) == []
    assert log_end(cluster, topic) == 2


def test_the_odradek_producer_reports_invalid_record(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, "compact")
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0}) as p:
        handle = p.send(topic, b"no key")
        p.flush()
        with pytest.raises(KafkaError) as info:
            handle.result(10)
    assert info.value.code == ErrorCode.invalid_record


def test_the_coordinators_still_write_the_compacted_offsets_topic(
        cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, "delete")
    send(cluster, topic, [(None, b"1"), (None, b"2")], 9)
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "ck-group",
            "auto.offset.reset": "earliest", "enable.auto.commit": "false"}
    c = Consumer(conf)
    try:
        c.assign([TopicPartition(topic, 0)])
        got: list[Any] = []
        for _ in range(40):
            got += c.poll(0.5)
            if len(got) >= 2:
                break
        c.commit()
    finally:
        c.close()
    assert admin.list_consumer_group_offsets("ck-group")[TopicPartition(topic, 0)].offset == 2
