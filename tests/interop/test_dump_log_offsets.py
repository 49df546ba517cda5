"""`odradek dump-log --offsets-decoder` (Kafka's DumpLogSegments --offsets-decoder) on the
`__consumer_offsets` segment of a broker process after confluent-kafka (librdkafka) ran a
consumer group that committed offsets with metadata, and a transactional producer committed a
group's offsets in a transaction (TxnOffsetCommit, then the COMMIT marker)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from .clients import create_topic
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

OVERRIDES = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
             "transaction.state.log.replication.factor": "1",
             "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0"}


def dump_offsets(broker: BrokerProcess) -> list[str]:
    assert broker.log_dir is not None
    segment = broker.log_dir / "__consumer_offsets-0" / "00000000000000000000.log"
    proc = subprocess.run([sys.executable, "-m", "odradek.cli", "dump-log", "--offsets-decoder",
                           "--files", str(segment)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_dump_log_decodes_a_real_groups_offsets_and_a_transactional_commit(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = broker_factory(overrides=OVERRIDES)
    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("dump")
    create_topic(bs, topic, 1)
    p = Producer({"bootstrap.servers": bs})
    for i in range(5):
        p.produce(topic, f"r{i}".encode(), partition=0)
    assert p.flush(10) == 0

    group = f"dump-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == 5
        member = c.memberid()
        c.commit(offsets=[TopicPartition(topic, 0, 5, metadata="five")], asynchronous=False)
    finally:
        c.close()

    txn_group = f"dump-txn-{uuid.uuid4().hex[:6]}"
    tc = Consumer({"bootstrap.servers": bs, "group.id": txn_group})
    tp = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    try:
        tp.init_transactions(30)
        tp.begin_transaction()
        tp.produce(topic, b"in-txn", partition=0)
        tp.send_offsets_to_transaction([TopicPartition(topic, 0, 3)],
                                       tc.consumer_group_metadata(), 30)
        tp.commit_transaction(30)
    finally:
        tc.close()

    deadline = time.monotonic() + 15
    while True:  # the COMMIT marker is written after EndTxn is answered
        lines = dump_offsets(broker)
        if any("endTxnMarker: COMMIT" in line for line in lines) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    records = [line for line in lines if line.startswith("| offset:")]
    assert not [r for r in records if "not an offsets record" in r]

    commit = [r for r in records if f"key: offset_commit::group={group},partition={topic}-0 "
              in r]
    assert len(commit) == 1
    # (librdkafka sends the metadata string with its C terminator: Kafka would print it too)
    payload = commit[0].split(" payload: ", 1)[1]
    assert payload.startswith("offset=5,metadata=five") and ",commitTimestamp=" in payload

    groups = [json.loads(r.split(" payload: ", 1)[1]) for r in records
              if f"key: group_metadata::group={group} " in r
              and not r.endswith("payload: <DELETE>")]
    stable = [g for g in groups if g["assignment"] != "{}"]
    assert stable, groups
    assert stable[0]["protocolType"] == "consumer"
    assert stable[0]["protocol"] == "range" and stable[0]["generationId"] >= 1
    assert stable[0]["leader"] == member
    assert stable[0]["assignment"] == f"{{{member}=[{topic}-0]}}"
    assert groups[-1]["assignment"] == "{}"  # after close(): the group is empty

    at = next(i for i, line in enumerate(lines)
              if f"key: offset_commit::group={txn_group},partition={topic}-0 " in line)
    assert " payload: offset=3," in lines[at]
    batch = next(line for line in reversed(lines[:at]) if line.startswith("baseOffset:"))
    assert "isTransactional: true isControl: false" in batch
    producer_id = batch.split("producerId: ", 1)[1].split()[0]
    marker_batch = next(i for i, line in enumerate(lines) if i > at
                        and line.startswith("baseOffset:") and "isControl: true" in line)
    assert f"producerId: {producer_id} " in lines[marker_batch]
    assert "endTxnMarker: COMMIT coordinatorEpoch: " in lines[marker_batch + 1]
