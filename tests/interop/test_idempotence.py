"""Idempotent producers: exactly the records written are read, the batches carry the producer id
and gapless sequences, and a Produce request delivered TWICE (what a retry after a lost response
looks like to the broker: same producer id, epoch and sequence) is appended once and answered
with the first append's offset."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from .clients import (
    Out,
    batch_headers,
    consume_confluent,
    create_topic,
    produce_confluent,
    watermarks,
)
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PARTITIONS = 3


def check_idempotent_log(log_dir: Path, topic: str, n: int) -> None:
    total = 0
    pids = set()
    for p in range(PARTITIONS):
        headers = batch_headers(log_dir, topic, p)
        expected_seq = 0
        expected_offset = 0
        for h in headers:
            pids.add((h["pid"], h["epoch"]))
            assert h["base_seq"] == expected_seq, f"p{p}: sequence gap/duplicate: {headers}"
            assert h["base_offset"] == expected_offset, f"p{p}: offsets: {headers}"
            expected_seq += h["count"]
            expected_offset = h["last_offset"] + 1
        total += expected_seq
    assert total == n, f"the log holds {total} records, {n} were written"
    assert len(pids) == 1 and next(iter(pids))[0] >= 0, f"producer ids/epochs: {pids}"


def records(n: int) -> list[Out]:
    return [Out(f"key-{i % 7}".encode(), f"value-{i}".encode(), (("i", str(i).encode()),))
            for i in range(n)]


def read_exactly(bs: str, topic: str, sent: list[Out]) -> None:
    got = consume_confluent(bs, topic, PARTITIONS, len(sent))
    assert sorted(r.value for r in got) == sorted(s.value for s in sent)  # type: ignore[type-var]
    assert sum(hi - lo for lo, hi in watermarks(bs, topic, PARTITIONS).values()) == len(sent)
    per_key: dict[bytes | None, list[int]] = defaultdict(list)
    for r in got:
        per_key[r.key].append(int(r.value.split(b"-")[1]))  # type: ignore[union-attr]
    for key, seq in per_key.items():
        assert seq == sorted(seq), f"key {key!r} out of order"


def test_kafka_python_idempotent_writes_exactly_n(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    bs = broker.bootstrap
    assert bs is not None and broker.log_dir is not None
    topic = unique_topic("idem-kp")
    create_topic(bs, topic, PARTITIONS)
    sent = records(600)
    p = KafkaProducer(bootstrap_servers=bs)  # idempotent by default in kafka-python 3
    try:
        assert p.config["enable_idempotence"] is True
        futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers))
                   for r in sent]
        p.flush(30)
        assert all(f.get(10) is not None for f in futures)
    finally:
        p.close(5)
    read_exactly(bs, topic, sent)
    check_idempotent_log(broker.log_dir, topic, len(sent))


def test_confluent_idempotent_writes_exactly_n(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    assert bs is not None and broker.log_dir is not None
    topic = unique_topic("idem-ck")
    create_topic(bs, topic, PARTITIONS)
    sent = records(600)
    acked = produce_confluent(bs, topic, sent, extra={"enable.idempotence": True})
    assert len(acked) == len(sent)
    read_exactly(bs, topic, sent)
    check_idempotent_log(broker.log_dir, topic, len(sent))


def test_duplicated_produce_requests_are_appended_once(broker: BrokerProcess) -> None:
    """Every ProduceRequest of a kafka-python idempotent producer goes out twice on its
    connection, and at the end the last few go out once more, after later batches were appended
    (a retry whose first answer was lost). The broker must append each batch once and answer
    every copy with no error and the first append's offsets."""
    from kafka import KafkaProducer
    from kafka.protocol.producer import ProduceRequest

    bs = broker.bootstrap
    assert bs is not None and broker.log_dir is not None
    topic = unique_topic("idem-dup")
    create_topic(bs, topic, PARTITIONS)
    sent = records(300)
    p = KafkaProducer(bootstrap_servers=bs)
    client = p._sender._client
    original_send = client.send
    pairs: list[tuple[Any, Any, Any, Any]] = []  # (node, request, first future, copy future)

    def send_twice(node_id: Any, request: Any, **kw: Any) -> Any:
        if not isinstance(request, ProduceRequest):
            return original_send(node_id, request, **kw)
        first = original_send(node_id, request, **kw)  # answered to the test
        copy = original_send(node_id, request, **kw)  # answered to the producer
        pairs.append((node_id, request, first, copy))
        return copy

    client.send = send_twice
    try:
        futures = []
        for i in range(0, len(sent), 50):  # rounds: several requests, each to every partition
            futures += [p.send(topic, key=r.key, value=r.value, headers=list(r.headers))
                        for r in sent[i:i + 50]]
            p.flush(30)
        acked = {r.value: (f.get(10).partition, f.get(10).offset)
                 for r, f in zip(sent, futures, strict=True)}
        assert len(pairs) >= 6, f"only {len(pairs)} produce requests"
        appended = {}
        for _node, _req, first, copy in pairs:
            first_bases = _bases(_wait(first), topic)
            assert _bases(_wait(copy), topic) == first_bases
            appended[id(_req)] = first_bases
        # Replays of the last requests, after later appends: still the first offsets.
        for node, req, _first, _copy in pairs[-3:]:
            replay = original_send(node, req)
            p._sender.wakeup()  # sent from this thread: wake the network thread's poll
            assert _bases(_wait(replay), topic) == appended[id(req)]
    finally:
        client.send = original_send
        p.close(5)
    got = consume_confluent(bs, topic, PARTITIONS, len(sent))
    assert {r.value: (r.partition, r.offset) for r in got} == acked
    read_exactly(bs, topic, sent)
    check_idempotent_log(broker.log_dir, topic, len(sent))


def _wait(fut: Any, timeout: float = 10) -> Any:
    """The producer's network thread completes the future (it owns the client's poll)."""
    deadline = time.monotonic() + timeout
    while not fut.is_done:
        assert time.monotonic() < deadline, "no response to a produce request"
        time.sleep(0.01)
    assert fut.succeeded(), fut.exception
    return fut.value


def _bases(resp: Any, topic: str) -> dict[int, int]:
    """partition -> base offset of a ProduceResponse, every partition without error."""
    out = {}
    for t in resp.responses:
        assert t.name == topic
        for pr in t.partition_responses:
            assert pr.error_code == 0, f"partition {pr.index}: error {pr.error_code}"
            out[pr.index] = pr.base_offset
    return out


def test_aiokafka_idempotent_writes_exactly_n(broker: BrokerProcess) -> None:
    from .clients import produce_aiokafka

    bs = broker.bootstrap
    assert bs is not None and broker.log_dir is not None
    topic = unique_topic("idem-aio")
    create_topic(bs, topic, PARTITIONS)
    sent = records(600)
    acked = produce_aiokafka(bs, topic, sent, extra={"enable_idempotence": True})
    assert len(acked) == len(sent)
    read_exactly(bs, topic, sent)
    check_idempotent_log(broker.log_dir, topic, len(sent))
