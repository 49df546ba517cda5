"""DeleteRecords under kill -9 (broker processes on a real ZooKeeper): a follower is paused so
the answer must wait for it (the low watermark), then the follower or the leader is killed
while `odradek delete-records` waits. The tool gets its answer (the dead follower leaves the
low watermark once its session expires; after the leader's death the tool retries on the new
leader), the killed broker restarts, and every replica's log start offset is at the target:
consumers from the beginning read exactly the records from it to the end, none below it,
none above it lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.zk_cluster import ZkCluster, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

TOPIC = "dr"
RECORDS = 200
TARGET = 120


@pytest.fixture
def zk_cluster(tmp_path: Path, zookeeper_connect: str) -> Iterator[ZkCluster]:
    cluster = ZkCluster(tmp_path, zookeeper_connect,
                        overrides={"log.retention.check.interval.ms": "500"}).start()
    try:
        yield cluster
    finally:
        cluster.close()


def produce_all(c: ZkCluster) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"segment.bytes": "2048"})],
                        operation_timeout=20)[TOPIC].result(30)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True})
    errors: list[object] = []
    for i in range(RECORDS):
        p.produce(TOPIC, key=b"k%d" % i, value=b"v%d" % i,
                  on_delivery=lambda err, msg: err and errors.append(err))
        if i % 10 == 9:
            p.flush(30)
    assert p.flush(30) == 0 and not errors, errors
    wait_until(lambda: c.fully_replicated(TOPIC), what="every replica in the ISR")


def run_tool(c: ZkCluster, workdir: Path) -> subprocess.Popen[str]:
    """`odradek delete-records` as users run it, in the background."""
    path = workdir / "offsets.json"
    path.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 0,
                                                "offset": TARGET}], "version": 1}))
    return subprocess.Popen(
        [sys.executable, "-m", "odradek.cli", "delete-records", "--bootstrap-server",
         c.bootstrap, "--offset-json-file", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def checkpointed_log_start(c: ZkCluster, broker: int) -> int | None:
    """The broker's log-start-offset-checkpoint entry for the partition (written as soon as
    the log start offset moves)."""
    path = c.brokers[broker].log_dir / "log-start-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if (topic, partition) == (TOPIC, "0"):
            return int(offset)
    return None


def consume_from_beginning(c: ZkCluster) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "dr-check",
                         "enable.auto.commit": False})
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(out) < RECORDS - TARGET and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.value()))
        m = consumer.poll(1.0)  # nothing more
        assert m is None or m.error() is not None, (m.offset(), m.value())
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("victim", ["follower", "leader"])
def test_delete_records_completes_after_a_kill9_while_pending(
        zk_cluster: ZkCluster, tmp_path: Path, victim: str) -> None:
    c = zk_cluster
    produce_all(c)
    time.sleep(1.5)  # the followers learn the final high watermark from their next fetch
    leader = c.leader(TOPIC, 0)
    paused = next(b for b in sorted(c.brokers) if b != leader)
    c.brokers[paused].pause()  # it stops fetching: the answer must wait for it
    try:
        tool = run_tool(c, tmp_path)
        time.sleep(2.0)
        assert tool.poll() is None, tool.communicate()
        killed = paused if victim == "follower" else leader
        c.brokers[killed].kill()
    finally:
        if victim == "leader":
            c.brokers[paused].resume()
    out, err = tool.communicate(timeout=120)
    assert tool.returncode == 0, err
    assert out.splitlines() == ["Executing records delete operation",
                                "Records delete operation completed:",
                                f"partition: {TOPIC}-0\tlow_watermark: {TARGET}"], (out, err)
    c.brokers[killed].restart(clean=False)
    c.wait_registered()
    wait_until(lambda: c.fully_replicated(TOPIC), timeout=60, what="the ISR whole again")
    wait_until(lambda: all(checkpointed_log_start(c, b) == TARGET for b in c.brokers),
               timeout=60, what="every replica's log start offset at the target")
    got = consume_from_beginning(c)
    assert got == [(o, b"v%d" % o) for o in range(TARGET, RECORDS)]
    # the killed broker kept it across its restart: a clean restart of every broker too
    assert c.stop_all() == {0: 0, 1: 0, 2: 0}
    assert all(checkpointed_log_start(c, b) == TARGET for b in c.brokers)
