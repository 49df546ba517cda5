"""Consumer groups with real clients against an `odradek broker` process (S-7.2 - S-7.5).

One group mixes confluent-kafka, kafka-python and aiokafka consumers subscribed to a topic of 6
partitions, all with the range assignor (the only strategy the three share), so whichever member
leads computes an assignment the others understand. The group must share the partitions
completely and disjointly after a member joins, leaves (close: LeaveGroup) and is killed
(SIGKILL: the session expires). Committed offsets survive, and a new consumer continues from
them. `auto.offset.reset` none raises when no offset is committed.

Each member is a separate process (this file run as a script) so that one can be SIGKILLed; it
prints JSON lines (its assignment when it changes, the records it consumed and committed) and
closes when told to on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

SESSION_MS = 6000
HEARTBEAT_MS = 500
PARTITIONS = 6
OVERRIDES = {"group.initial.rebalance.delay.ms": "100",
             "group.min.session.timeout.ms": "1000"}
REPO = Path(__file__).resolve().parents[2]


# -- the member process ----------------------------------------------------------------------------

def _emit(event: str, **kw: Any) -> None:
    print(json.dumps({"event": event, **kw}), flush=True)


def _stdin_watcher() -> threading.Event:
    stop = threading.Event()

    def watch() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()
    threading.Thread(target=watch, daemon=True).start()
    return stop


def _member_confluent(bootstrap: str, group: str, topic: str, name: str,
                      stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                  "partition.assignment.strategy": "range", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                  "heartbeat.interval.ms": HEARTBEAT_MS})
    c.subscribe([topic])
    last: list[int] | None = None
    while not stop.is_set():
        batch, positions = [], {}
        for m in c.consume(num_messages=100, timeout=0.1):
            if m.error():
                _emit("error", error=str(m.error()))
                continue
            batch.append([m.partition(), m.offset(), m.value().decode()])
            positions[m.partition()] = m.offset() + 1
        committed = True
        if positions:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()],
                         asynchronous=False)
            except KafkaException as exc:
                committed = False
                _emit("commit_failed", error=str(exc))
            _emit("consumed", records=batch, committed=committed)
        now = sorted(tp.partition for tp in c.assignment())
        if now != last:
            _emit("assignment", partitions=now)
            last = now
    c.close()


def _member_kafka_python(bootstrap: str, group: str, topic: str, name: str,
                         stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.errors import KafkaError

    k = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name,
                      partition_assignment_strategy=[RangePartitionAssignor],
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    last: list[int] | None = None
    while not stop.is_set():
        polled = k.poll(timeout_ms=100)
        batch = [[r.partition, r.offset, r.value.decode()]
                 for records in polled.values() for r in records]
        if batch:
            committed = True
            try:
                k.commit()
            except KafkaError as exc:
                committed = False
                _emit("commit_failed", error=repr(exc))
            _emit("consumed", records=batch, committed=committed)
        now = sorted(tp.partition for tp in k.assignment())
        if now != last:
            _emit("assignment", partitions=now)
            last = now
    k.close()


def _member_aiokafka(bootstrap: str, group: str, topic: str, name: str,
                     stop: threading.Event) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.errors import KafkaError

    async def main() -> None:
        a = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name,
                             partition_assignment_strategy=(RangePartitionAssignor,),
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS)
        await a.start()
        last: list[int] | None = None
        while not stop.is_set():
            polled = await a.getmany(timeout_ms=100)
            batch = [[r.partition, r.offset, r.value.decode()]
                     for records in polled.values() for r in records]
            if batch:
                committed = True
                try:
                    await a.commit()
                except KafkaError as exc:
                    committed = False
                    _emit("commit_failed", error=repr(exc))
                _emit("consumed", records=batch, committed=committed)
            now = sorted(tp.partition for tp in a.assignment())
            if now != last:
                _emit("assignment", partitions=now)
                last = now
        await a.stop()

    asyncio.run(main())


MEMBERS = {"confluent": _member_confluent, "kafka-python": _member_kafka_python,
           "aiokafka": _member_aiokafka}


def _member_main(argv: list[str]) -> None:
    client, bootstrap, group, topic, name = argv
    stop = _stdin_watcher()
    MEMBERS[client](bootstrap, group, topic, name, stop)
    _emit("closed")


# -- the test side ------------------------------------------------------------------------------

class Member:
    """A member process and what it reported."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.client = client
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "member", client, bootstrap, group, topic, name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        self.assignment: set[int] | None = None
        self.consumed: list[tuple[int, int, str]] = []  # committed ones
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(event)
                if event["event"] == "assignment":
                    self.assignment = set(event["partitions"])
                elif event["event"] == "consumed" and event["committed"]:
                    self.consumed += [tuple(r) for r in event["records"]]

    def close(self, timeout: float = 30) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout)
        self.reader.join(5)
        assert self.proc.returncode == 0, self.stderr()
        self.assignment = None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.assignment = None

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read()[-4000:]

    def values(self) -> set[str]:
        with self.lock:
            return {v for _, _, v in self.consumed}

    def __repr__(self) -> str:
        return f"{self.name}({self.client}): {self.assignment}"


def wait_until(pred: Callable[[], bool], timeout: float, what: str,
               show: Callable[[], object] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {show()}")
        time.sleep(0.05)


def shares_all(members: list[Member]) -> bool:
    """Every member holds some partitions, no partition twice, all of them held."""
    sets = [m.assignment for m in members]
    if any(not s for s in sets):
        return False
    held = [p for s in sets for p in s]  # type: ignore[union-attr]
    return len(held) == len(set(held)) and set(held) == set(range(PARTITIONS))


def produce(bootstrap: str, topic: str, tag: str, per_partition: int) -> set[str]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    values = set()
    for part in range(PARTITIONS):
        for i in range(per_partition):
            v = f"{tag}-p{part}-{i}"
            p.produce(topic, value=v.encode(), partition=part)
            values.add(v)
    assert p.flush(30) == 0
    return values


def describe(bootstrap: str, group: str) -> Any:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(15)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def test_mixed_clients_share_partitions_through_joins_leaves_and_kills(broker_factory) -> None:
    from confluent_kafka import ConsumerGroupState

    from tests.interop.clients import create_topic

    broker = broker_factory(overrides=OVERRIDES)
    bootstrap = broker.bootstrap
    topic = f"groups-{uuid.uuid4().hex[:6]}"
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS)
    produced = produce(bootstrap, topic, "a", 10)

    members: list[Member] = []

    def start(client: str, name: str) -> Member:
        m = Member(client, bootstrap, group, topic, name)
        members.append(m)
        return m

    try:
        c = start("confluent", "c")
        k = start("kafka-python", "k")
        wait_until(lambda: shares_all([c, k]), 60, "c and k to share the partitions",
                   lambda: members)
        # range over 6 partitions and 2 members: 3 each
        assert sorted(len(m.assignment or ()) for m in (c, k)) == [3, 3]

        # a third member (aiokafka) joins
        a = start("aiokafka", "a")
        wait_until(lambda: shares_all([c, k, a]), 60, "a rebalance after a joins",
                   lambda: members)
        desc = describe(bootstrap, group)
        assert desc.state == ConsumerGroupState.STABLE
        assert desc.partition_assignor == "range"
        assert len(desc.members) == 3
        assigned = [tp.partition for m in desc.members for tp in m.assignment.topic_partitions]
        assert sorted(assigned) == list(range(PARTITIONS))
        produced |= produce(bootstrap, topic, "b", 10)

        # k leaves (close sends LeaveGroup): the others take its partitions at once
        k.close()
        wait_until(lambda: shares_all([c, a]), 30, "a rebalance after k leaves",
                   lambda: members)

        # c is killed: its session expires after session.timeout.ms, then a has everything
        killed_at = time.monotonic()
        c.kill()
        wait_until(lambda: shares_all([a]), SESSION_MS / 1000 + 30,
                   "a rebalance after c's session expired", lambda: members)
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1.5
        produced |= produce(bootstrap, topic, "c", 10)

        # every record was consumed and committed by someone (at least once)
        wait_until(lambda: produced <= set().union(*(m.values() for m in members)), 60,
                   "every record consumed", lambda: len(produced))
        wait_until(lambda: committed_offsets(bootstrap, group, topic) ==
                   dict.fromkeys(range(PARTITIONS), 30), 30, "offsets committed to the end",
                   lambda: committed_offsets(bootstrap, group, topic))
        a.close()

        # a new consumer of the group continues from the committed offsets
        fresh = produce(bootstrap, topic, "d", 1)
        n = start("kafka-python", "n")
        wait_until(lambda: n.values() >= fresh, 60, "the new consumer to read new records",
                   lambda: n.consumed)
        time.sleep(0.5)
        assert n.values() == fresh  # nothing before the committed offsets
        assert sorted((p, o) for p, o, _ in n.consumed) == [(p, 30) for p in range(PARTITIONS)]
        n.close()
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.kill()


def test_auto_offset_reset_none_without_committed_offsets(broker_factory) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.errors import NoOffsetForPartitionError

    from tests.interop.clients import create_topic

    broker = broker_factory(overrides=OVERRIDES)
    bootstrap = broker.bootstrap
    topic = f"reset-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 2)

    # kafka-python: auto_offset_reset='none' raises NoOffsetForPartitionError
    kp = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"kp-{uuid.uuid4().hex[:6]}",
                       auto_offset_reset="none", enable_auto_commit=False,
                       partition_assignment_strategy=[RangePartitionAssignor],
                       session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    try:
        deadline = time.monotonic() + 60
        raised = None
        while raised is None and time.monotonic() < deadline:
            try:
                kp.poll(timeout_ms=200)
            except NoOffsetForPartitionError as exc:
                raised = exc
        assert raised is not None, "kafka-python did not raise NoOffsetForPartitionError"
    finally:
        kp.close()

    # confluent-kafka: auto.offset.reset=error reports _AUTO_OFFSET_RESET
    group = f"ck-{uuid.uuid4().hex[:6]}"
    ck = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                   "auto.offset.reset": "error", "enable.auto.commit": False,
                   "partition.assignment.strategy": "range",
                   "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    try:
        ck.subscribe([topic])
        deadline = time.monotonic() + 60
        code = None
        while code is None and time.monotonic() < deadline:
            m = ck.poll(0.2)
            if m is not None and m.error() is not None:
                code = m.error().code()
        assert code == KafkaError._AUTO_OFFSET_RESET
    finally:
        ck.close()

    # with committed offsets (committed by a consumer outside the group protocol: generation
    # -1), the same settings read from them
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for part in (0, 1):
        for i in range(5):
            p.produce(topic, value=f"v{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0
    simple = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = simple.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)],
                            asynchronous=False)
        assert all(tp.error is None for tp in got)
    finally:
        simple.close()
    kp = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                       auto_offset_reset="none", enable_auto_commit=False,
                       partition_assignment_strategy=[RangePartitionAssignor],
                       session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    try:
        seen: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            for records in kp.poll(timeout_ms=200).values():
                seen += [(r.partition, r.offset, r.value) for r in records]
        assert sorted(seen) == [(0, 3, b"v0-3"), (0, 4, b"v0-4"), (1, 4, b"v1-4")]
    finally:
        kp.close()


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "member":
    _member_main(sys.argv[2:])
