"""DescribeLogDirs (key 35) against an `odradek broker` process with two log dirs: through
kafka-python's KafkaAdminClient.describe_log_dirs and through `odradek log-dirs --describe`
(Kafka's kafka-log-dirs.sh output), after confluent-kafka wrote to a topic."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.interop.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(180)


def odradek(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "odradek.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def make_broker(broker_factory: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, list[str]]:
    b = broker_factory(start=False)
    dirs = [str(b.workdir / "logs-a"), str(b.workdir / "logs-b")]
    b.overrides["log.dirs"] = ",".join(dirs)
    b.start()
    return b, dirs


def write(bs: str, topic: str, partitions: int = 4, n: int = 40) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bs, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def test_kafka_python_describe_log_dirs(broker_factory: Callable[..., BrokerProcess]) -> None:
    from kafka.admin import KafkaAdminClient

    b, dirs = make_broker(broker_factory)
    assert b.bootstrap is not None
    topic = f"logdirs-{uuid.uuid4().hex[:6]}"
    write(b.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        response = admin.describe_log_dirs()
    finally:
        admin.close()
    # kafka-python 3: [{"broker": id, "log_dirs": [DescribeLogDirsResult.to_dict()]}]
    assert [r["broker"] for r in response] == [0]
    results = {d["log_dir"]: d for d in response[0]["log_dirs"]}
    assert sorted(results) == sorted(dirs)
    seen: dict[int, int] = {}
    for d in results.values():
        assert d["error_code"] == 0
        for t in d["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    assert p["offset_lag"] == 0 and p["is_future_key"] is False
                    seen[p["partition_index"]] = p["partition_size"]
    assert sorted(seen) == [0, 1, 2, 3]
    assert all(size > 0 for size in seen.values())


def test_log_dirs_tool(broker_factory: Callable[..., BrokerProcess]) -> None:
    b, dirs = make_broker(broker_factory)
    assert b.bootstrap is not None
    topic = f"logdirs-{uuid.uuid4().hex[:6]}"
    write(b.bootstrap, topic, partitions=2)
    code, out, err = odradek("log-dirs", "--describe", "--bootstrap-server", b.bootstrap,
                             "--topic-list", topic)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1] == "Received log directory information from brokers 0"
    doc = json.loads(lines[2])
    assert doc["version"] == 1 and [x["broker"] for x in doc["brokers"]] == [0]
    log_dirs = doc["brokers"][0]["logDirs"]
    assert sorted(d["logDir"] for d in log_dirs) == sorted(dirs)
    parts = sorted(p["partition"] for d in log_dirs for p in d["partitions"])
    assert parts == [f"{topic}-0", f"{topic}-1"]
    for d in log_dirs:
        assert d["error"] is None
        for p in d["partitions"]:
            assert p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False
    code, out, err = odradek("log-dirs", "--describe", "--bootstrap-server", b.bootstrap,
                             "--broker-list", "0", "--topic-list", "no-such-topic")
    assert code == 0, err
    assert all(d["partitions"] == [] for d in json.loads(out.splitlines()[2])["brokers"][0]
               ["logDirs"])


def test_kafka_python_alter_replica_log_dirs(broker_factory: Callable[..., BrokerProcess]
                                             ) -> None:
    """kafka-python's KafkaAdminClient.alter_replica_log_dirs (AlterReplicaLogDirs, key 34)
    moves every partition of a topic to the other log dir; describe_log_dirs then shows them
    there (no future replica left). A dir the broker does not have: LogDirNotFoundError."""
    import time

    from kafka import errors
    from kafka.admin import KafkaAdminClient

    b, dirs = make_broker(broker_factory)
    assert b.bootstrap is not None
    topic = f"alterdirs-{uuid.uuid4().hex[:6]}"
    write(b.bootstrap, topic, partitions=2, n=200)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        def where() -> dict[tuple[int, bool], str]:
            out = {}
            for d in admin.describe_log_dirs()[0]["log_dirs"]:
                for t in d["topics"]:
                    if t["name"] == topic:
                        for p in t["partitions"]:
                            out[(p["partition_index"], p["is_future_key"])] = d["log_dir"]
            return out

        before = where()
        target = {p: next(d for d in dirs if d != before[(p, False)]) for p in (0, 1)}
        result = admin.alter_replica_log_dirs({(topic, p, 0): target[p] for p in (0, 1)})
        assert {(r.topic, r.partition, r.broker_id): e for r, e in result.items()} == {
            (topic, 0, 0): errors.NoError, (topic, 1, 0): errors.NoError}
        deadline = time.monotonic() + 30
        while where() != {(p, False): target[p] for p in (0, 1)}:
            assert time.monotonic() < deadline, where()
            time.sleep(0.1)
        bad = admin.alter_replica_log_dirs({(topic, 0, 0): str(b.workdir / "nowhere"),
                                            (topic, 7, 0): target[0]})
        assert {r.partition: e for r, e in bad.items()} == {
            0: errors.LogDirNotFoundError, 7: errors.UnknownTopicOrPartitionError}
    finally:
        admin.close()
    # everything written is still there, read by a real consumer from the moved logs
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-" + topic,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got) == sorted(b"v%d" % i for i in range(200))
    finally:
        c.close()
