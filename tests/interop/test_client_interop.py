"""odradek's client and console tools with real Kafka clients, against a broker process:
odradek Producer -> confluent-kafka consumer, confluent-kafka / aiokafka producers -> odradek
Consumer, `odradek console-producer` / `console-consumer` subprocesses with Kafka's flags, and
consumer groups mixing odradek with librdkafka and kafka-python members (which need the broker's
group coordinator: skipped, with the reason, while the broker lacks JoinGroup)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import Admin, Consumer, Producer, TopicPartition
from odradek.client.partitioner import murmur2_partition

from .clients import (
    CODECS,
    Out,
    codecs_on_disk,
    consume_confluent,
    produce_aiokafka,
    produce_confluent,
)
from .conftest import BrokerProcess, _broker_ctx, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]


OVERRIDES = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "5",
             "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module, able to host the group coordinator on its own."""
    with _broker_ctx(tmp_path_factory.mktemp("client-broker"), overrides=OVERRIDES) as b:
        yield b


def create(broker: BrokerProcess, partitions: int = 3) -> str:
    topic = unique_topic("cli")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, partitions, 1)
    return topic


def records(n: int, tag: str) -> list[Out]:
    out = []
    for i in range(n):
        key = f"key-{i % 9}".encode()
        value = (f"{tag}|{i:04d}|" + "body " * (i % 17)).encode() + bytes([0, 10, 255])
        headers = (("src", tag.encode()), ("dup", b"1"), ("dup", b"2"), ("empty", b""),
                   ("bin", bytes([0, 1, 254])))
        out.append(Out(key, value, headers))
    return out


# -- odradek <-> real clients -----------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
def test_odradek_producer_to_confluent_consumer(broker: BrokerProcess, codec: str) -> None:
    topic = create(broker)
    sent = records(240, "odradek")
    with Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec}) as p:
        futs = [p.send(topic, r.value, key=r.key, headers=list(r.headers)) for r in sent]
        acked = {r.value: f.result(30) for r, f in zip(sent, futs, strict=True)}
    got = consume_confluent(broker.bootstrap, topic, 3, len(sent))
    assert len(got) == len(sent)
    by_value = {r.value: r for r in sent}
    for r in got:
        s = by_value[r.value]
        md = acked[r.value]
        assert (r.key, r.headers) == (s.key, s.headers)
        assert (r.partition, r.offset) == (md.partition, md.offset)
        assert r.partition == murmur2_partition(s.key, 3)
    assert codecs_on_disk(broker.log_dir, topic, 3) == {codec}


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_producer_to_odradek_consumer(broker: BrokerProcess, codec: str) -> None:
    topic = create(broker)
    sent = records(240, "confluent")
    acked = produce_confluent(broker.bootstrap, topic, sent, codec)
    got = _consume_odradek(broker, topic, 3, len(sent))
    assert sorted(r.value for r in got) == sorted(r.value for r in sent)
    by_value = {r.value: r for r in sent}
    for r in got:
        assert (r.key, tuple(r.headers)) == (by_value[r.value].key, by_value[r.value].headers)
        assert (r.partition, r.offset) == acked[r.value]


def test_aiokafka_producer_to_odradek_consumer(broker: BrokerProcess) -> None:
    topic = create(broker)
    sent = records(120, "aiokafka")
    acked = produce_aiokafka(broker.bootstrap, topic, sent, "gzip")
    got = _consume_odradek(broker, topic, 3, len(sent))
    assert {r.value: (r.partition, r.offset) for r in got} == acked


def _consume_odradek(broker: BrokerProcess, topic: str, partitions: int, expected: int,
                     timeout: float = 20) -> list[Any]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got += c.poll(0.5)
        got += c.poll(0.2)
        return got
    finally:
        c.close()


# -- console tools -----------------------------------------------------------------------------
def odradek(*args: str, stdin: bytes | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess[bytes]:
    script = Path(sys.executable).parent / "odradek"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "odradek.cli"]
    return subprocess.run([*cmd, *args], input=stdin, capture_output=True, timeout=timeout,
                          check=False)


def test_console_tools_without_a_reachable_broker_say_so_without_a_traceback() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    for tool in ("console-producer", "console-consumer"):
        r = odradek(tool, "--bootstrap-server", dead, "--topic", "t", stdin=b"x\n")
        err = r.stderr.decode()
        assert r.returncode == 1, (tool, err)
        assert "Traceback" not in err
        assert "no broker answered Metadata" in err and dead.split(":")[1] in err \
            and "(None)" not in err, err


def test_console_producer_and_consumer_from_beginning(broker: BrokerProcess) -> None:
    topic = create(broker, partitions=1)
    lines = b"k1\tv1\nk2\tv2 with spaces\n\tempty-key\nk4\t\n"
    r = odradek("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--property", "parse.key=true", stdin=lines)
    assert r.returncode == 0, r.stderr.decode()
    r = odradek("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--property", "parse.key=true", "--property", "parse.headers=true",
                "--property", "null.marker=NULL", "--compression-codec", "lz4",
                stdin=b"h1:a,h2:b\tk5\tv5\n\tNULL\tv6\nh3:x\tk7\tNULL\n")
    assert r.returncode == 0, r.stderr.decode()
    r = odradek("console-producer", "--broker-list", broker.bootstrap, "--topic", topic,
                stdin=b"plain value\n")
    assert r.returncode == 0, r.stderr.decode()

    r = odradek("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--from-beginning", "--property", "print.key=true", "--max-messages", "8")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [
        "k1\tv1", "k2\tv2 with spaces", "\tempty-key", "k4\t", "k5\tv5", "null\tv6",
        "k7\tnull", "null\tplain value"]
    assert "Processed a total of 8 messages" in r.stderr.decode()

    # What confluent-kafka reads back from the same topic.
    got = consume_confluent(broker.bootstrap, topic, 1, 8)
    assert [(m.key, m.value, m.headers) for m in got[4:7]] == [
        (b"k5", b"v5", (("h1", b"a"), ("h2", b"b"))), (None, b"v6", ()),
        (b"k7", None, (("h3", b"x"),))]

    r = odradek("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--partition", "0", "--offset", "4", "--max-messages", "3",
                "--property", "print.offset=true", "--property", "print.partition=true",
                "--property", "print.headers=true", "--property", "print.timestamp=true",
                "--property", "print.key=true", "--property", "key.separator=|")
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode().splitlines()
    assert [line.split("|", 1)[1] for line in out] == [
        "Partition:0|Offset:4|h1:a,h2:b|k5|v5", "Partition:0|Offset:5|NO_HEADERS|null|v6",
        "Partition:0|Offset:6|h3:x|k7|null"]
    assert all(line.startswith("CreateTime:") for line in out)


def test_console_consumer_starts_at_the_end_without_from_beginning(
        broker: BrokerProcess) -> None:
    topic = create(broker, partitions=2)
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(5):
            p.send(topic, f"old{i}".encode())
    script = Path(sys.executable).parent / "odradek"
    proc = subprocess.Popen([str(script), "console-consumer", "--bootstrap-server",
                             broker.bootstrap, "--topic", topic, "--max-messages", "2",
                             "--timeout-ms", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # New records until it has printed two: however long the process takes to start and
        # find its (latest) positions, what it prints must all be new.
        with Producer({"bootstrap.servers": broker.bootstrap}) as p:
            deadline = time.monotonic() + 30
            sent = 0
            while proc.poll() is None and time.monotonic() < deadline:
                p.send(topic, f"new{sent}".encode(), partition=sent % 2)
                p.flush()
                sent += 1
                time.sleep(0.5)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert len(lines) == 2 and all(line.startswith("new") for line in lines), lines


def test_console_consumer_with_group_commits_its_progress(broker: BrokerProcess) -> None:
    topic = create(broker, partitions=2)
    group = f"console-{uuid.uuid4().hex[:8]}"
    values = [f"m{i}" for i in range(8)]
    r = odradek("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                stdin="".join(v + "\n" for v in values).encode())
    assert r.returncode == 0, r.stderr.decode()
    first = odradek("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic",
                    topic, "--group", group, "--from-beginning", "--max-messages", "5")
    assert first.returncode == 0, first.stderr.decode()
    seen = first.stdout.decode().splitlines()
    assert len(seen) == 5
    second = odradek("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic",
                     topic, "--group", group, "--from-beginning", "--timeout-ms", "4000")
    assert second.returncode == 0, second.stderr.decode()
    rest = second.stdout.decode().splitlines()
    assert sorted(seen + rest) == sorted(values), (seen, rest)  # nothing twice, nothing lost
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        committed = admin.list_consumer_group_offsets(group)
    assert sum(om.offset for om in committed.values()) == 8


# -- mixed consumer groups ---------------------------------------------------------------------
class ConfluentMember:
    """A confluent-kafka consumer in a group, polled in its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        from confluent_kafka import Consumer as CConsumer

        self.records: list[tuple[int, bytes]] = []
        self.assignment: set[TopicPartition] = set()
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._c = CConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": strategy,
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})

        def on_assign(_c: Any, parts: list[Any]) -> None:
            self.assignment = {TopicPartition(p.topic, p.partition) for p in parts}

        def on_revoke(_c: Any, _parts: list[Any]) -> None:
            self.assignment = set()

        self._c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self._c.poll(0.1)
            if m is None:
                continue
            if m.error() is not None:
                self.errors.append(m.error())
                continue
            self.records.append((m.partition(), m.value()))

    def close(self) -> None:
        self._stop.set()
        self._t.join(10)
        self._c.close()


def _balanced(a: set[TopicPartition], b: set[TopicPartition], partitions: int,
              topic: str) -> bool:
    return bool(a) and bool(b) and not a & b and \
        a | b == {TopicPartition(topic, p) for p in range(partitions)}


def _mixed_group(broker: BrokerProcess, strategy: str, odradek_first: bool) -> None:
    """Two members, one odradek and one librdkafka: once the group is stable (whoever led
    it computed the assignment for both), records produced to every partition are each read
    exactly once, by the member owning its partition."""
    topic = create(broker, partitions=6)
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    ours = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    theirs: ConfluentMember | None = None
    got: list[Any] = []
    try:
        if odradek_first:
            ours.subscribe([topic])
            while not ours.assignment():
                got += ours.poll(0.1)
        theirs = ConfluentMember(broker.bootstrap, group, topic, strategy)
        if not odradek_first:
            deadline = time.monotonic() + 30
            while not theirs.assignment and time.monotonic() < deadline:
                time.sleep(0.05)  # librdkafka joins (and leads) first
            assert theirs.assignment
            ours.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _balanced(
                ours.assignment(), theirs.assignment, 6, topic):
            got += ours.poll(0.1)
        a, b = ours.assignment(), theirs.assignment
        assert _balanced(a, b, 6, topic), (a, b)
        assert len(a) == len(b) == 3  # both assignors balance 6 partitions over 2 members
        if strategy == "range":
            assert {tp.partition for tp in a} in ({0, 1, 2}, {3, 4, 5})
        else:
            assert {tp.partition for tp in a} in ({0, 2, 4}, {1, 3, 5})
        assert not got and not theirs.records  # nothing was produced yet

        values = [f"x{i}".encode() for i in range(300)]
        with Producer({"bootstrap.servers": broker.bootstrap}) as p:
            for i, v in enumerate(values):
                p.send(topic, v, partition=i % 6)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) + len(theirs.records) < len(values):
            got += ours.poll(0.1)
        got += ours.poll(0.3)
        assert sorted([r.value for r in got] + [v for _, v in theirs.records]) == \
            sorted(values), "records lost or read twice"
        assert {r.partition for r in got} == {tp.partition for tp in a}
        assert {p for p, _ in theirs.records} == {tp.partition for tp in b}
        assert not theirs.errors
    finally:
        if theirs is not None:
            theirs.close()
        ours.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
@pytest.mark.parametrize("odradek_first", [True, False], ids=["odradek-leads",
                                                               "librdkafka-leads"])
def test_mixed_group_with_confluent(broker: BrokerProcess, strategy: str,
                                    odradek_first: bool) -> None:
    _mixed_group(broker, strategy, odradek_first)


def test_mixed_group_with_kafka_python(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    topic = create(broker, partitions=4)
    group = f"kp-{uuid.uuid4().hex[:8]}"
    ours = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest",
                     "partition.assignment.strategy": "roundrobin",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    kp = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                       auto_offset_reset="earliest", session_timeout_ms=6000,
                       heartbeat_interval_ms=300,
                       partition_assignment_strategy=[RoundRobinPartitionAssignor])
    got: list[Any] = []
    theirs: list[tuple[int, bytes]] = []

    def kp_poll() -> None:
        for batch in kp.poll(timeout_ms=100).values():
            theirs.extend((m.partition, m.value) for m in batch)

    def kp_parts() -> set[TopicPartition]:
        return {TopicPartition(t.topic, t.partition) for t in kp.assignment()}

    try:
        ours.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _balanced(ours.assignment(), kp_parts(), 4,
                                                            topic):
            got += ours.poll(0.1)
            kp_poll()
        mine, their_parts = ours.assignment(), kp_parts()
        assert _balanced(mine, their_parts, 4, topic) and len(mine) == 2, (mine, their_parts)
        values = [f"y{i}".encode() for i in range(200)]
        with Producer({"bootstrap.servers": broker.bootstrap}) as p:
            for i, v in enumerate(values):
                p.send(topic, v, partition=i % 4)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) + len(theirs) < len(values):
            got += ours.poll(0.1)
            kp_poll()
        assert sorted([r.value for r in got] + [v for _, v in theirs]) == sorted(values)
        assert {r.partition for r in got} == {tp.partition for tp in mine}
        assert {p for p, _ in theirs} == {tp.partition for tp in their_parts}
    finally:
        kp.close()
        ours.close()
