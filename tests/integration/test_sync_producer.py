"""odradek.client's synchronous Producer (S-7.1) against embedded clusters: many threads sending
through a small buffer keep each thread's order within its partition and write every record
exactly once (idempotence, with Produce responses lost on the way); delivery callbacks run once
per record with the offset the record got, before flush() returns; with the broker gone the
bounded buffer blocks for max.block.ms and then raises."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import (
    Admin,
    Consumer,
    KafkaError,
    KafkaTimeoutError,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.delivery import DeliveryHandle
from odradek.cluster import Cluster
from tests.integration.test_client import _drop_produce_responses

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(3, data_dir=tmp_path_factory.mktemp("sync-producer")) as c:
        yield c


def new_topic(cluster: Cluster, partitions: int) -> str:
    name = f"sp-{uuid.uuid4().hex[:10]}"
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as a:
        a.create_topic(name, partitions, min(3, len(cluster.live_brokers())))
        a.wait_for_topics([name])
    return name


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                timeout: float = 60) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got += c.poll(0.5)
        got += c.poll(0.3)  # duplicates beyond `expected` must show up too
        return got
    finally:
        c.close()


def test_threads_keep_order_and_write_each_record_once(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = new_topic(cluster, 3)
    seen = _drop_produce_responses(monkeypatch, {2, 5, 9, 14})
    threads, per_thread = 4, 1500
    # buffer.memory of ~150 records: the senders block on it again and again.
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "buffer.memory": 20_000,
                  "linger.ms": 2, "retry.backoff.ms": 20})
    handles: dict[int, list[DeliveryHandle]] = {}
    errors: list[BaseException] = []
    go = threading.Barrier(threads)

    def sender(t: int) -> None:
        try:
            go.wait()
            handles[t] = [p.send(topic, f"{t}:{i:05d}".encode() + b"." * 90, key=f"t{t}")
                          for i in range(per_thread)]
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=sender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    try:
        assert not errors, errors
        assert p.flush(60) == 0 and len(p) == 0
        mds = {t: [h.result(0) for h in hs] for t, hs in handles.items()}
    finally:
        p.close()
    monkeypatch.undo()
    assert len(seen) >= 15, "responses were not dropped: the retries were not exercised"

    total = threads * per_thread
    got = consume_all(cluster.bootstrap_servers, topic, 3, total)
    counts = Counter(r.value for r in got)
    assert len(got) == total and max(counts.values()) == 1, "records lost or duplicated"
    where = {r.value: (r.partition, r.offset) for r in got}
    for t in range(threads):
        mine = [r for r in got if r.key == f"t{t}".encode()]
        assert len({r.partition for r in mine}) == 1  # one key, one partition
        by_offset = [r.value for r in sorted(mine, key=lambda r: r.offset)]
        assert by_offset == sorted(by_offset), f"thread {t}'s records changed order"
        for i, m in enumerate(mds[t]):
            assert (m.partition, m.offset) == where[f"{t}:{i:05d}".encode() + b"." * 90]


def test_callbacks_once_per_record_with_the_offset_and_flush_waits(cluster: Cluster) -> None:
    topic = new_topic(cluster, 2)
    n = 3000
    lock = threading.Lock()
    calls: list[tuple[bytes, KafkaError | None, RecordMetadata | None]] = []
    callback_threads: set[str] = set()

    def callback_for(value: bytes) -> Any:
        def cb(err: KafkaError | None, md: RecordMetadata | None) -> None:
            with lock:
                calls.append((value, err, md))
                callback_threads.add(threading.current_thread().name)
        return cb

    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 50}) as p:
        handles = []
        for i in range(n):
            v = f"v{i:05d}".encode()
            if i % 2:
                handles.append(p.send(topic, v, partition=i % 2, on_delivery=callback_for(v)))
            else:  # confluent-kafka's produce(..., callback=)
                p.produce(topic, v, partition=i % 2, callback=callback_for(v))
        assert p.flush(60) == 0
        # flush() returned: every record has been called back already.
        assert len(calls) == n and len(p) == 0
        assert all(h.done() for h in handles)
    assert callback_threads == {"odradek-producer"}  # the loop thread, as documented
    assert all(err is None for _, err, _ in calls)
    values = Counter(v for v, _, _ in calls)
    assert len(values) == n and max(values.values()) == 1, "a callback ran twice or never"
    got = consume_all(cluster.bootstrap_servers, topic, 2, n)
    where = {r.value: (r.partition, r.offset) for r in got}
    assert len(where) == n
    for v, _, md in calls:
        assert md is not None and (md.partition, md.offset) == where[v]
    for h in handles:
        assert (h.result().partition, h.result().offset) in where.values()


def test_a_full_buffer_blocks_for_max_block_then_raises(tmp_path: Path) -> None:
    with Cluster(1, data_dir=tmp_path) as cl:
        topic = new_topic(cl, 1)
        p = Producer({"bootstrap.servers": cl.bootstrap_servers, "buffer.memory": 4000,
                      "max.block.ms": 1500, "linger.ms": 0, "request.timeout.ms": 2000})
        try:
            assert p.send(topic, b"first").result(20).offset == 0  # metadata is known
            cl.kill_broker(0)  # nothing can be delivered from now on
            value = b"x" * 100
            accepted: list[DeliveryHandle] = []
            with pytest.raises(KafkaTimeoutError) as info:
                for _ in range(1000):
                    accepted.append(p.send(topic, value))
            assert "max blocking time 1500 ms" in str(info.value)
            # 4000 bytes of buffer.memory hold 4000 // 121 records of 100 bytes
            # (21 bytes of record overhead each); the rest waited, then failed.
            assert len(accepted) == 4000 // (100 + 21)
            assert len(p) == len(accepted)
            assert not any(h.done() for h in accepted)
            with pytest.raises(KafkaTimeoutError):  # still full: the next send fails too
                p.send(topic, value)
        finally:
            p.close(0.5)
        for h in accepted:  # close() fails what it could not deliver
            assert isinstance(h.exception(5), KafkaError)


def test_the_record_count_bound(tmp_path: Path) -> None:
    with Cluster(1, data_dir=tmp_path) as cl:
        topic = new_topic(cl, 1)
        p = Producer({"bootstrap.servers": cl.bootstrap_servers,
                      "queue.buffering.max.messages": 10, "max.block.ms": 500,
                      "linger.ms": 0})
        try:
            p.send(topic, b"first").result(20)
            cl.kill_broker(0)
            sent = 0
            with pytest.raises(KafkaTimeoutError, match="max blocking time 500 ms"):
                for _ in range(100):
                    p.send(topic, b"v")
                    sent += 1
            assert sent == 10
        finally:
            p.close(0.5)


def test_a_live_cluster_absorbs_more_than_the_buffer(cluster: Cluster) -> None:
    """Back-pressure waits for deliveries: 20x buffer.memory goes through without an error."""
    topic = new_topic(cluster, 1)
    delivered = defaultdict(int)

    def cb(err: KafkaError | None, md: RecordMetadata | None) -> None:
        delivered["ok" if err is None else "failed"] += 1

    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "buffer.memory": 5000,
                   "max.block.ms": 30_000}) as p:
        for i in range(800):  # 800 x ~125 bytes = 100 kB through a 5 kB buffer
            p.send(topic, f"{i:04d}".encode() + b"." * 100, on_delivery=cb)
        assert p.flush(60) == 0
    assert delivered == {"ok": 800}


def test_sending_from_a_callback_and_after_close(cluster: Cluster) -> None:
    """A delivery callback runs on the loop thread: it may send (the buffer has room), and
    flush() there is refused instead of deadlocking. After close() sends raise."""
    topic = new_topic(cluster, 1)
    follow_ups: list[DeliveryHandle] = []
    refused: list[BaseException] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})

    def cb(err: KafkaError | None, md: RecordMetadata | None) -> None:
        assert md is not None
        if md.offset < 3:
            follow_ups.append(p.send(topic, f"follow-up of {md.offset}".encode()))
        else:
            try:
                p.flush(1)
            except RuntimeError as exc:
                refused.append(exc)

    try:
        for i in range(4):
            p.send(topic, f"first {i}".encode(), on_delivery=cb)
        # The first flush may return while the follow-ups sent by the callbacks are on their
        # way: it counts them as undelivered.
        assert p.flush(30) in (0, 1, 2, 3)
        assert p.flush(30) == 0
        assert [h.result(0).offset for h in follow_ups] == [4, 5, 6]
        assert len(refused) == 1 and "own loop" in str(refused[0])
    finally:
        p.close()
    p.close()
    with pytest.raises(KafkaError, match="closed"):
        p.send(topic, b"too late")
