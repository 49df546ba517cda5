"""Kafka's znode layout and JSON payloads (S-5.2), as Kafka's ZkData writes and reads them."""

from __future__ import annotations

import json

import pytest

from odradek.coordination import paths
from odradek.coordination.paths import (
    BrokerRegistration,
    Endpoint,
    LeaderIsrAndControllerEpoch,
    TopicAssignment,
)


def j(data: bytes) -> object:
    return json.loads(data)


def test_znode_paths_and_sequence_numbers_are_kafkas() -> None:
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.topic_path("t") == "/brokers/topics/t"
    assert paths.topic_partitions_path("t") == "/brokers/topics/t/partitions"
    assert paths.topic_partition_path("t", 2) == "/brokers/topics/t/partitions/2"
    assert paths.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.delete_topic_path("t") == "/admin/delete_topics/t"
    assert paths.topic_config_path("t") == "/config/topics/t"
    assert paths.config_entity_path("clients", "c1") == "/config/clients/c1"
    assert paths.CONTROLLER == "/controller" and paths.CONTROLLER_EPOCH == "/controller_epoch"
    assert paths.REASSIGN_PARTITIONS == "/admin/reassign_partitions"
    assert paths.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"
    assert paths.CLUSTER_ID == "/cluster/id"
    assert paths.isr_change_path() == "/isr_change_notification/isr_change_"
    assert paths.isr_change_path("0000000007") == "/isr_change_notification/isr_change_0000000007"
    assert paths.config_change_path() == "/config/changes/config_change_"
    assert paths.log_dir_event_path() == "/log_dir_event_notification/log_dir_event_"
    assert paths.sequence_number("isr_change_0000000042", paths.ISR_CHANGE_PREFIX) == "0000000042"
    change = "/config/changes/config_change_0000000001"
    assert paths.sequence_number(change, paths.CONFIG_CHANGE_PREFIX) == "0000000001"
    with pytest.raises(ValueError):
        paths.sequence_number("other_1", paths.ISR_CHANGE_PREFIX)
    for bad in ("", "a/b", ".", ".."):
        with pytest.raises(ValueError):
            paths.topic_path(bad)


def test_persistent_paths_are_kafkas() -> None:
    assert set(paths.PERSISTENT_PATHS) == {
        "/consumers",
        "/brokers/ids",
        "/brokers/topics",
        "/config/changes",
        "/admin/delete_topics",
        "/brokers/seqid",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/log_dir_event_notification",
        "/config/topics",
        "/config/clients",
        "/config/users",
        "/config/brokers",
        "/config/ips",
    }


def test_broker_registration_v4_like_kafka() -> None:
    reg = BrokerRegistration(
        broker_id=1,
        endpoints=(Endpoint("PLAINTEXT", "host1", 9092),),
        timestamp="1700000000000",
    )
    obj = j(paths.encode_broker_registration(reg))
    assert obj == {
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["PLAINTEXT://host1:9092"],
        "jmx_port": -1,
        "host": "host1",
        "timestamp": "1700000000000",
        "port": 9092,
        "version": 4,
    }
    assert paths.decode_broker_registration(1, paths.encode_broker_registration(reg)) == reg


def test_broker_registration_rack_listeners_v5_and_old_versions() -> None:
    reg = BrokerRegistration(
        broker_id=2,
        endpoints=(
            Endpoint("CLIENT", "h", 9093, "SSL"),
            Endpoint("REPLICATION", "::1", 9094, "PLAINTEXT"),
        ),
        rack="dc1",
        jmx_port=9999,
        version=5,
        timestamp="1",
        features={"f": {"min_version": 1, "max_version": 2}},
    )
    data = paths.encode_broker_registration(reg)
    obj = j(data)
    assert obj["endpoints"] == ["CLIENT://h:9093", "REPLICATION://[::1]:9094"]
    assert obj["host"] == "::1" and obj["port"] == 9094  # the first PLAINTEXT endpoint
    assert obj["rack"] == "dc1" and obj["features"] == {"f": {"min_version": 1, "max_version": 2}}
    decoded = paths.decode_broker_registration(2, data)
    assert decoded == reg
    assert decoded.endpoint("CLIENT") == Endpoint("CLIENT", "h", 9093, "SSL")
    assert decoded.plaintext_endpoint == Endpoint("REPLICATION", "::1", 9094, "PLAINTEXT")

    no_plaintext = BrokerRegistration(3, (Endpoint("SSL", "h", 1, "SSL"),), timestamp="1")
    obj = j(paths.encode_broker_registration(no_plaintext))
    assert obj["host"] is None and obj["port"] == -1
    generated = j(paths.encode_broker_registration(BrokerRegistration(4, ())))
    assert generated["timestamp"].isdigit()  # type: ignore[index]

    v1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert paths.decode_broker_registration(0, v1).endpoints == (
        Endpoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),
    )
    v2 = (
        b'{"version":2,"host":"localhost","port":9092,"jmx_port":9999,'
        b'"timestamp":"2233345666","endpoints":["PLAINTEXT://host1:9092","SSL://host1:9093"]}'
    )
    assert [e.security_protocol for e in paths.decode_broker_registration(0, v2).endpoints] == [
        "PLAINTEXT",
        "SSL",
    ]
    for bad in (b"", b"not json", b"[]", b'{"version":0,"jmx_port":1}', b'{"version":4}'):
        with pytest.raises(ValueError):
            paths.decode_broker_registration(0, bad)


def test_endpoint_parse() -> None:
    assert Endpoint.parse("plaintext://h:1") == Endpoint("PLAINTEXT", "h", 1, "PLAINTEXT")
    assert Endpoint.parse("INTERNAL://[fe80::1]:9092", {"INTERNAL": "SASL_SSL"}) == Endpoint(
        "INTERNAL", "fe80::1", 9092, "SASL_SSL"
    )
    assert Endpoint.parse("PLAINTEXT://:9092").host == ""
    with pytest.raises(ValueError):
        Endpoint.parse("nonsense")


def test_topic_assignment_v1_and_reading_v2_v3() -> None:
    assignment = TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1)})
    data = paths.encode_topic_assignment(assignment)
    assert j(data) == {"version": 1, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]}}
    assert data == b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]}}'
    assert paths.decode_topic_assignment(data) == assignment

    moving = TopicAssignment({0: (4, 1, 2)}, adding_replicas={0: (4,)}, removing_replicas={0: (2,)})
    obj = j(paths.encode_topic_assignment(moving))
    assert obj == {
        "version": 2,
        "partitions": {"0": [4, 1, 2]},
        "adding_replicas": {"0": [4]},
        "removing_replicas": {"0": [2]},
    }
    assert paths.decode_topic_assignment(paths.encode_topic_assignment(moving)) == moving

    kafka_2_4 = b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{}}'
    assert paths.decode_topic_assignment(kafka_2_4) == TopicAssignment({0: (1,)})
    kafka_2_8 = (
        b'{"version":3,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{},'
        b'"topic_id":"AAAAAAAAAAAAAAAAAAAAAA"}'
    )
    decoded = paths.decode_topic_assignment(kafka_2_8)
    assert decoded.topic_id == "AAAAAAAAAAAAAAAAAAAAAA" and decoded.version == 3
    assert j(paths.encode_topic_assignment(decoded))["topic_id"] == decoded.topic_id  # type: ignore[index]
    assert paths.decode_topic_assignment(b"") == TopicAssignment({})
    with pytest.raises(ValueError):
        paths.decode_topic_assignment(b'{"version":1,"partitions":{"x":[1]}}')


def test_partition_state() -> None:
    state = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    data = paths.encode_partition_state(state)
    assert j(data) == {
        "controller_epoch": 1,
        "leader": 1,
        "version": 1,
        "leader_epoch": 0,
        "isr": [1, 2],
    }
    assert paths.decode_partition_state(data) == state
    newer = b'{"controller_epoch":3,"leader":-1,"version":1,"leader_epoch":7,"isr":[],"x":1}'
    assert paths.decode_partition_state(newer) == LeaderIsrAndControllerEpoch(-1, 7, (), 3)
    assert paths.decode_partition_state(b"") is None
    with pytest.raises(ValueError):
        paths.decode_partition_state(b'{"leader":1}')


def test_controller_and_epoch() -> None:
    data = paths.encode_controller(2, timestamp_ms=1700000000000)
    assert j(data) == {"version": 1, "brokerid": 2, "timestamp": "1700000000000"}
    decoded = paths.decode_controller(data)
    assert decoded is not None
    assert (decoded.broker_id, decoded.timestamp) == (2, "1700000000000")
    assert paths.decode_controller(b"5") == paths.ControllerRegistration(5)
    assert paths.decode_controller(b"") is None
    assert j(paths.encode_controller(1))["timestamp"].isdigit()  # type: ignore[index]
    assert paths.encode_controller_epoch(12) == b"12"
    assert paths.decode_controller_epoch(b"12") == 12
    assert paths.INITIAL_CONTROLLER_EPOCH == 0
    with pytest.raises(ValueError):
        paths.decode_controller_epoch(b"x")


def test_admin_payloads() -> None:
    reassignment = {("t", 1): (3, 4), ("a", 0): (1,)}
    data = paths.encode_reassignment(reassignment)
    assert j(data) == {
        "version": 1,
        "partitions": [
            {"topic": "a", "partition": 0, "replicas": [1]},
            {"topic": "t", "partition": 1, "replicas": [3, 4]},
        ],
    }
    assert paths.decode_reassignment(data) == reassignment
    assert paths.decode_reassignment(b"") == {}

    election = {("t", 0), ("t", 1)}
    data = paths.encode_preferred_replica_election(election)
    assert j(data) == {
        "version": 1,
        "partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}],
    }
    assert paths.decode_preferred_replica_election(data) == election
    with pytest.raises(ValueError):
        paths.decode_preferred_replica_election(b'{"version":1}')


def test_notifications() -> None:
    data = paths.encode_isr_change_notification([("t", 0), ("u", 2), ("t", 0)])
    assert j(data) == {
        "version": 1,
        "partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 2}],
    }
    assert paths.decode_isr_change_notification(data) == {("t", 0), ("u", 2)}
    assert paths.decode_log_dir_event(paths.encode_log_dir_event(4)) == 4
    assert j(paths.encode_log_dir_event(4)) == {"version": 1, "broker": 4, "event": 1}


def test_configs_and_cluster_id() -> None:
    data = paths.encode_entity_config({"retention.ms": "1000", "cleanup.policy": "compact"})
    assert j(data) == {
        "version": 1,
        "config": {"retention.ms": "1000", "cleanup.policy": "compact"},
    }
    assert paths.decode_entity_config(data) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert paths.decode_entity_config(b"") == {}
    assert paths.decode_entity_config(b'{"version":1,"config":{"n":5}}') == {"n": "5"}

    change = paths.encode_config_change("topics/t")
    assert j(change) == {"version": 2, "entity_path": "topics/t"}
    assert paths.decode_config_change(change) == "topics/t"
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"t"}'
    assert paths.decode_config_change(v1) == "topics/t"

    assert j(paths.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert paths.decode_cluster_id(paths.encode_cluster_id("abc")) == "abc"
    with pytest.raises(ValueError):
        paths.decode_cluster_id(b"{}")


def test_decoded_partitions_match_controller_topic_partition() -> None:
    """(topic, partition) tuples compare and hash equal to the controller's named tuple."""
    from typing import NamedTuple

    class TopicPartition(NamedTuple):
        topic: str
        partition: int

    decoded = paths.decode_isr_change_notification(
        paths.encode_isr_change_notification([TopicPartition("t", 0)])
    )
    assert TopicPartition("t", 0) in decoded
