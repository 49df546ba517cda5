"""CreateTopics / DeleteTopics / DescribeConfigs through confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient: partition counts, a topic config honoured in DescribeConfigs,
TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR (rf 3 on one broker), INVALID_CONFIG, and a
deleted topic gone from metadata."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from .clients import (
    Out,
    consume_kafka_python,
    create_topic,
    produce_confluent,
    wait_for_leaders,
    watermarks,
)
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

RETENTION = "123456789"


def wait_until(predicate: Callable[[], object], timeout: float = 10,
               what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def test_admin_confluent(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    topic = unique_topic("adm-ck")

    # create: 5 partitions, a retention.ms override
    futs = admin.create_topics([NewTopic(topic, 5, 1, config={"retention.ms": RETENTION})],
                               operation_timeout=10)
    futs[topic].result(15)
    wait_for_leaders(bs, topic, 5)
    md = admin.list_topics(topic, timeout=10).topics[topic]
    assert sorted(md.partitions) == [0, 1, 2, 3, 4]
    for p in md.partitions.values():
        assert (p.leader, list(p.replicas), list(p.isrs)) == (0, [0], [0])

    # DescribeConfigs: the override with its source; a default with its own
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(15)
    assert entries["retention.ms"].value == RETENTION
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # a second create: TOPIC_ALREADY_EXISTS
    again = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic]
    with pytest.raises(KafkaException) as exc:
        again.result(15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # rf 3 on a one-broker cluster: INVALID_REPLICATION_FACTOR, and nothing is created
    rf3 = unique_topic("adm-ck-rf3")
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(rf3, 1, 3)], operation_timeout=10)[rf3].result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert admin.list_topics(timeout=10).topics.get(rf3) is None

    # an invalid config value: INVALID_CONFIG
    bad = unique_topic("adm-ck-bad")
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(bad, 1, 1, config={"retention.ms": "soon"})],
                            operation_timeout=10)[bad].result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG

    # validate_only creates nothing
    vo = unique_topic("adm-ck-vo")
    admin.create_topics([NewTopic(vo, 2, 1)], validate_only=True)[vo].result(15)
    assert vo not in admin.list_topics(timeout=10).topics

    # delete: gone from metadata (all topics and by name), and its log dirs go
    admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics,
               what=f"{topic} to leave the metadata")
    assert broker.log_dir is not None
    wait_until(lambda: not any(broker.log_dir.glob(f"{topic}-*")), what="the logs to go")
    # deleting it again: UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_kafka_python(broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import (
        InvalidReplicationFactorError,
        TopicAlreadyExistsError,
        UnknownTopicOrPartitionError,
    )

    bs = broker.bootstrap
    topic = unique_topic("adm-kp")
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1,
                                     "configs": {"retention.ms": RETENTION}}},
                            timeout_ms=10000)
        wait_for_leaders(bs, topic, 3)
        described = admin.describe_topics([topic])
        assert [len(t["partitions"]) for t in described] == [3]
        assert topic in admin.list_topics()

        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                         config_filter="all")
        flat = _flatten_configs(configs, topic)
        assert flat["retention.ms"] == RETENTION, flat
        assert flat["cleanup.policy"] == "delete", flat
        modified = _flatten_configs(admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]), topic)
        assert modified == {"retention.ms": RETENTION}

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                                timeout_ms=10000)
        rf3 = unique_topic("adm-kp-rf3")
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics({rf3: {"num_partitions": 1, "replication_factor": 3}},
                                timeout_ms=10000)
        assert rf3 not in admin.list_topics()

        admin.delete_topics([topic], timeout_ms=10000)
        wait_until(lambda: topic not in admin.list_topics(), what=f"{topic} to be deleted")
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic], timeout_ms=10000)
    finally:
        admin.close()


def _flatten_configs(result: object, topic: str) -> dict[str, str | None]:
    """kafka-python 3's describe_configs: {type: {name: {key: {value: ...}}}} (a list of
    responses in older releases); reduced to {key: value}."""
    if isinstance(result, dict):
        by_name = next(iter(result.values())) if len(result) == 1 else result.get("topic", {})
        entries = by_name[topic]
        return {k: (v["value"] if isinstance(v, dict) else v) for k, v in entries.items()}
    raise AssertionError(f"unexpected describe_configs result: {result!r}")


def test_create_partitions_confluent(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("adm-parts")
    create_topic(bs, topic, 2)
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=10)[topic].result(15)
    wait_for_leaders(bs, topic, 5)
    # every partition, old and new, takes writes
    from confluent_kafka import Producer

    delivered: list[tuple[object, int, int]] = []
    prod = Producer({"bootstrap.servers": bs})
    for p in range(5):
        prod.produce(topic, f"p{p}".encode(), partition=p,
                     on_delivery=lambda e, m: delivered.append((e, m.partition(), m.offset())))
    assert prod.flush(15) == 0
    assert sorted(delivered, key=lambda d: d[1]) == [(None, p, 0) for p in range(5)]
    # shrinking is refused
    with pytest.raises(KafkaException) as exc:
        admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=10)[topic] \
            .result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_delete_then_recreate_starts_empty(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("adm-recreate")
    create_topic(bs, topic, 2)
    produce_confluent(bs, topic, [Out(f"k{i}".encode(), f"old-{i}".encode())
                                  for i in range(50)])
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics,
               what=f"{topic} to be deleted")
    create_topic(bs, topic, 2)  # may need a retry while the deletion completes: it must not
    assert watermarks(bs, topic, 2) == {0: (0, 0), 1: (0, 0)}
    acked = produce_confluent(bs, topic, [Out(b"k", b"new")])
    assert [off for _p, off in acked.values()] == [0]
    got = consume_kafka_python(bs, topic, 2, 1)
    assert [r.value for r in got] == [b"new"]
