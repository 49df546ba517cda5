"""`odradek topics` and `odradek consumer-groups` (S-6.3) as commands (subprocesses) against an
`odradek broker` process, on a topic and a consumer group made by confluent-kafka (librdkafka):
describe shows librdkafka's member, client id and exact lag; a reset done by the tool is what
confluent-kafka then reads as committed."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.interop.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(180)


def odradek(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "odradek.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_describe_and_reset_a_confluent_kafka_group(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(overrides={"group.initial.rebalance.delay.ms": "0"})
    bs = b.bootstrap
    assert bs is not None
    topic = f"interop-{uuid.uuid4().hex[:6]}"
    group = f"rdkafka-{uuid.uuid4().hex[:6]}"

    code, out, err = odradek("topics", "--bootstrap-server", bs, "--create", "--topic", topic,
                             "--partitions", "2", "--replication-factor", "1")
    assert (code, out) == (0, f"Created topic {topic}.\n"), err
    code, out, _ = odradek("topics", "--bootstrap-server", bs, "--describe", "--topic", topic)
    assert code == 0
    assert out.splitlines()[1:] == [
        f"\tTopic: {topic}\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        f"\tTopic: {topic}\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0"]

    p = Producer({"bootstrap.servers": bs})
    for i in range(9):
        p.produce(topic, f"v{i}".encode(), partition=0 if i < 6 else 1)
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": "rdkafka-member",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 9 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == 9
        c.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)],
                 asynchronous=False)
        member_id = c.memberid()
        code, out, err = odradek("consumer-groups", "--bootstrap-server", bs, "--describe",
                                 "--group", group)
        assert (code, err) == (0, ""), out + err
        rows = table(out)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                           "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert [r[:6] for r in rows[1:]] == [[group, topic, "0", "2", "6", "4"],
                                             [group, topic, "1", "3", "3", "0"]]
        assert {r[6] for r in rows[1:]} == {member_id}
        assert {r[8] for r in rows[1:]} == {"rdkafka-member"}
        code, out, _ = odradek("consumer-groups", "--bootstrap-server", bs, "--describe",
                               "--group", group, "--members")
        assert table(out)[1][1:] == [member_id, rows[1][7], "rdkafka-member", "2"]
        code, out, _ = odradek("consumer-groups", "--bootstrap-server", bs, "--reset-offsets",
                               "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert code == 1 and "is inactive, but the current state is Stable." in out
    finally:
        c.close()

    deadline = time.monotonic() + 60
    while True:
        code, out, _ = odradek("consumer-groups", "--bootstrap-server", bs, "--reset-offsets",
                               "--group", group, "--topic", f"{topic}:0", "--shift-by", "3",
                               "--execute")
        if code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # until librdkafka's LeaveGroup has emptied the group
    assert code == 0, out
    assert table(out)[1] == [group, topic, "0", "5"]
    reader = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        offsets = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                   timeout=30)
    finally:
        reader.close()
    assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 5), (1, 3)]


def test_group_admin_apis_through_real_admin_clients(broker: BrokerProcess) -> None:
    """ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, OffsetDelete, DeleteGroups and
    ListOffsets through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient, each
    checked against what `odradek consumer-groups` then shows (the admin API coverage table of
    docs/tools.md)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient, OffsetSpec
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    bs = broker.bootstrap
    assert bs is not None
    topic = f"grp-admin-{uuid.uuid4().hex[:6]}"
    ck_group, kp_group = f"ck-{uuid.uuid4().hex[:6]}", f"kp-{uuid.uuid4().hex[:6]}"
    code, _, err = odradek("topics", "--bootstrap-server", bs, "--create", "--topic", topic,
                           "--partitions", "2", "--replication-factor", "1")
    assert code == 0, err
    p = Producer({"bootstrap.servers": bs})
    for i in range(7):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0

    ck = AdminClient({"bootstrap.servers": bs})
    latest = ck.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()})
    assert next(iter(latest.values())).result(15).offset == 7  # ListOffsets
    ck.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(  # OffsetCommit
        ck_group, [TopicPartition(topic, 0, 3)])])[ck_group].result(15)
    listed = ck.list_consumer_group_offsets(  # OffsetFetch
        [ConsumerGroupTopicPartitions(ck_group)])[ck_group].result(15)
    assert [(tp.partition, tp.offset) for tp in listed.topic_partitions] == [(0, 3)]
    groups = {g.group_id for g in ck.list_consumer_groups().result(15).valid}  # ListGroups
    assert ck_group in groups
    described = ck.describe_consumer_groups([ck_group])[ck_group].result(15)  # DescribeGroups
    assert described.group_id == ck_group and not described.members
    code, out, _ = odradek("consumer-groups", "--bootstrap-server", bs, "--describe",
                           "--group", ck_group)
    assert [r[:6] for r in table(out)[1:]] == [[ck_group, topic, "0", "3", "7", "4"]], out
    ck.delete_consumer_groups([ck_group])[ck_group].result(15)  # DeleteGroups
    code, out, _ = odradek("consumer-groups", "--bootstrap-server", bs, "--list")
    assert ck_group not in out.split()

    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        kp.alter_group_offsets(kp_group, {KTP(topic, 0): OffsetAndMetadata(5, "", -1),
                                          KTP(topic, 1): OffsetAndMetadata(0, "", -1)})
        assert kp_group in {g["group_id"] for g in kp.list_groups()}
        assert kp.describe_groups([kp_group])[kp_group]["group_state"] == "Empty"
        offsets = kp.list_group_offsets(kp_group)[kp_group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 5, 1: 0}
        kp.delete_group_offsets(kp_group, [KTP(topic, 1)])  # OffsetDelete
        code, out, _ = odradek("consumer-groups", "--bootstrap-server", bs, "--describe",
                               "--group", kp_group)
        assert [r[:6] for r in table(out)[1:]] == [[kp_group, topic, "0", "5", "7", "2"]], out
        kp.delete_groups([kp_group])
        assert kp_group not in {g["group_id"] for g in kp.list_groups()}
    finally:
        kp.close()
