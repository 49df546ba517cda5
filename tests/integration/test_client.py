"""odradek's own client (S-7) against embedded clusters: produce/consume round trips (keys,
headers, every codec), the partitioner against librdkafka's murmur2_random, idempotent retries,
leader failover, seek, max.poll.records, offset resets, admin; and consumer groups through the
broker's coordinator (skipped, with the reason, while the broker lacks JoinGroup)."""

from __future__ import annotations

import asyncio
import itertools
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
    AsyncConsumer,
    AsyncProducer,
    CommitFailedError,
    ConfigResource,
    Consumer,
    KafkaError,
    NewTopic,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    OffsetOutOfRangeError,
    Producer,
    RecordTooLargeError,
    TopicPartition,
)
from odradek.client.connection import BrokerConnection
from odradek.client.errors import KafkaConnectionError, TopicAlreadyExistsError
from odradek.client.partitioner import murmur2_partition
from odradek.cluster import Cluster
from tests.integration.cluster_fixtures import module_admin, module_cluster
from tests.interop.clients import batch_headers

pytestmark = pytest.mark.timeout(180)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "client-cluster", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


def new_topic(admin: Admin, partitions: int = 3, rf: int = 3, **config: str) -> str:
    name = f"c-{uuid.uuid4().hex[:10]}"
    admin.create_topic(name, partitions, rf, {k.replace("_", "."): v for k, v in config.items()})
    return name


def conf(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap_servers}
    out.update({k.replace("_", "."): v for k, v in extra.items()})
    return out


def consume_all(cluster: Cluster, topic: str, partitions: int, expected: int,
                timeout: float = 20, **extra: Any) -> list[Any]:
    c = Consumer(conf(cluster, auto_offset_reset="earliest", **extra))
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got += c.poll(0.5)
        # Anything beyond `expected` (duplicates) must show up too.
        got += c.poll(0.3)
        return got
    finally:
        c.close()


def log_dir_of_leader(cluster: Cluster, admin: Admin, topic: str, p: int) -> Path:
    leader = admin.describe_topics([topic])[topic].partitions[p].leader
    return cluster.data_dir / f"broker-{leader}"


# -- produce and consume -----------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keys_headers_every_codec(cluster: Cluster, admin: Admin, codec: str) -> None:
    topic = new_topic(admin, partitions=3)
    sent = []
    with Producer(conf(cluster, compression_type=codec, linger_ms=20)) as p:
        futs = []
        for i in range(300):
            key = None if i % 10 == 9 else f"key-{i % 7}".encode()
            value = (f"{i:05d}|" + "payload " * (i % 13)).encode() + bytes([0, 255, i % 256])
            headers = [("seq", str(i).encode()), ("dup", b"a"), ("dup", b"b"), ("empty", b""),
                       ("null", None)]
            sent.append((key, value, headers))
            futs.append(p.send(topic, value, key=key, headers=headers,
                               timestamp_ms=1_700_000_000_000 + i))
        assert p.flush(30) == 0
        acked = [f.result(10) for f in futs]
    got = consume_all(cluster, topic, 3, len(sent))
    assert len(got) == len(sent), f"read {len(got)} of {len(sent)}"
    by_value = {r.value: r for r in got}
    for (key, value, headers), md in zip(sent, acked, strict=True):
        r = by_value[value]
        assert (r.key, r.headers) == (key, headers)
        assert (r.partition, r.offset) == (md.partition, md.offset)
        assert r.timestamp == md.timestamp == 1_700_000_000_000 + int(value[:5])
        if key is not None:
            assert md.partition == murmur2_partition(key, 3)
    per_partition: dict[int, list[int]] = defaultdict(list)
    for r in got:
        per_partition[r.partition].append(r.offset)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))
    for k in {k for k, _, _ in sent if k is not None}:  # per-key order kept
        seq = [int(r.value[:5]) for r in sorted(got, key=lambda r: (r.partition, r.offset))
               if r.key == k]
        assert seq == sorted(seq)
    codes = {h["codec"] for part in range(3)
             for h in batch_headers(log_dir_of_leader(cluster, admin, topic, part), topic, part)}
    assert codes == {CODECS.index(codec)}


def test_batches_respect_batch_size_and_linger(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    with Producer(conf(cluster, batch_size=2000, linger_ms=1000)) as p:
        futs = [p.send(topic, b"x" * 90, key=b"k") for _ in range(100)]
        t0 = time.monotonic()
        for f in futs[:30]:
            f.result(10)  # full batches go before linger.ms
        assert time.monotonic() - t0 < 0.9
        p.flush(10)
    headers = batch_headers(log_dir_of_leader(cluster, admin, topic, 0), topic, 0)
    assert sum(h["count"] for h in headers) == 100
    assert len(headers) >= 5 and max(h["count"] for h in headers) <= 20  # ~2000 bytes each


def test_async_api_round_trip(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=2)

    async def body() -> list[Any]:
        async with AsyncProducer(conf(cluster)) as p:
            futs = [await p.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
                    for i in range(50)]
            mds = await asyncio.gather(*futs)
            assert all(md.offset >= 0 for md in mds)
            md = await p.send_and_wait(topic, b"last", partition=1)
            assert md.partition == 1
        async with AsyncConsumer(conf(cluster, auto_offset_reset="earliest")) as c:
            c.assign([(topic, 0), (topic, 1)])
            got: list[Any] = []
            while len(got) < 51:
                got += await c.poll(5)
            return got

    got = asyncio.run(body())
    assert sorted(r.value for r in got) == sorted([f"v{i}".encode() for i in range(50)]
                                                  + [b"last"])


def test_partitioner_places_keys_where_librdkafka_murmur2_random_does(
        cluster: Cluster, admin: Admin) -> None:
    from confluent_kafka import Producer as CProducer

    topic = new_topic(admin, partitions=7)
    keys = [f"user-{i}".encode() for i in range(150)] + [b"", b"\x00 ", "ключ".encode()]
    theirs: dict[bytes, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        theirs[msg.key()] = msg.partition()

    cp = CProducer({"bootstrap.servers": cluster.bootstrap_servers,
                    "partitioner": "murmur2_random"})
    for k in keys:
        cp.produce(topic, b"confluent", key=k, on_delivery=on_delivery)
    assert cp.flush(30) == 0
    with Producer(conf(cluster)) as p:
        ours = {k: p.send(topic, b"odradek", key=k).result(10).partition for k in keys}
    assert ours == theirs
    assert ours == {k: murmur2_partition(k, 7) for k in keys}


def test_null_keys_stick_to_a_partition_per_batch(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=6)
    with Producer(conf(cluster, batch_size=1000, linger_ms=50)) as p:
        futs = [p.send(topic, b"v" * 50) for _ in range(400)]
        parts = [f.result(10).partition for f in futs]
    runs = sum(1 for a, b in itertools.pairwise(parts) if a != b) + 1
    assert len(set(parts)) >= 3, Counter(parts)  # spread over partitions...
    assert runs <= 400 // 10, f"{runs} switches"  # ...in runs of about batch.size bytes


def test_acks_zero_and_one(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    with Producer(conf(cluster, acks=0)) as p:
        mds = [p.send(topic, f"a0-{i}".encode()).result(10) for i in range(20)]
        assert all(md.offset == -1 for md in mds)  # acks=0: no offsets known
        p.flush(10)
    with Producer(conf(cluster, acks=1)) as p:
        mds = [p.send(topic, f"a1-{i}".encode()).result(10) for i in range(20)]
    assert [md.offset for md in mds] == list(range(20, 40))
    assert len(consume_all(cluster, topic, 1, 40)) == 40


def test_record_too_large_and_bad_config(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    with Producer(conf(cluster, max_request_size=10_000)) as p:
        with pytest.raises(RecordTooLargeError):
            p.send(topic, b"x" * 20_000)
        assert p.send(topic, b"x" * 5_000).result(10).offset == 0
    with pytest.raises(ValueError, match="acks must be all"):
        Producer(conf(cluster, acks=1, enable_idempotence=True))
    with pytest.raises(ValueError, match="acks"):
        Producer(conf(cluster, acks="2"))


def test_unknown_topic_is_auto_created_or_times_out(cluster: Cluster) -> None:
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    with Producer(conf(cluster)) as p:
        assert p.send(topic, b"v").result(20).offset == 0  # auto.create.topics.enable=true
    with Producer(conf(cluster, max_block_ms=500, allow_auto_create_topics=False)) as p:
        fut = p.send(f"missing-{uuid.uuid4().hex[:8]}", b"v")
        with pytest.raises(KafkaError, match="not present in metadata"):
            fut.result(10)


# -- idempotence and retries -------------------------------------------------------------------
def _drop_produce_responses(monkeypatch: pytest.MonkeyPatch, which: set[int]) -> list[int]:
    """Lose the responses of the Produce requests numbered in `which` (1-based): the broker
    has written the batch, the producer sees its connection break and must retry."""
    seen: list[int] = []
    original = BrokerConnection._on_frame

    def on_frame(self: BrokerConnection, payload: bytes) -> None:
        cid = int.from_bytes(payload[:4], "big", signed=True)
        entry = self._inflight.get(cid)
        if entry is not None and entry[1].__api_key__ == 0:
            seen.append(cid)
            if len(seen) in which:
                self.close(KafkaConnectionError("injected: produce response lost"))
                return
        original(self, payload)

    monkeypatch.setattr(BrokerConnection, "_on_frame", on_frame)
    return seen


@pytest.mark.parametrize("idempotent", [True, False])
def test_retry_after_lost_response(cluster: Cluster, admin: Admin,
                                   monkeypatch: pytest.MonkeyPatch, idempotent: bool) -> None:
    topic = new_topic(admin, partitions=1)
    seen = _drop_produce_responses(monkeypatch, {1, 3, 4})
    values = [f"r{i:03d}".encode() for i in range(60)]
    with Producer(conf(cluster, enable_idempotence=idempotent, linger_ms=5,
                       max_in_flight_requests_per_connection=5, retry_backoff_ms=20)) as p:
        futs = []
        for i, v in enumerate(values):
            futs.append(p.send(topic, v, key=b"k"))
            if i % 10 == 9:
                p.flush(20)
        mds = [f.result(20) for f in futs]
    monkeypatch.undo()
    assert len(seen) >= 6, "responses were not dropped: the test proves nothing"
    got = consume_all(cluster, topic, 1, len(values))
    counts = Counter(r.value for r in got)
    if idempotent:
        assert [r.value for r in got] == values, "idempotent retries wrote duplicates or " \
            "lost order"
        assert [md.offset for md in mds] == list(range(len(values)))
        assert len({h["pid"] for h in batch_headers(
            log_dir_of_leader(cluster, admin, topic, 0), topic, 0)}) == 1
    else:
        # The same faults without idempotence duplicate records: what the test guards against.
        assert set(counts) == set(values)
        assert max(counts.values()) > 1, "expected duplicates without idempotence"


def test_leader_failover_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    with Cluster(3, data_dir=tmp_path, overrides=OVERRIDES) as cl:
        a = Admin({"bootstrap.servers": cl.bootstrap_servers})
        try:
            topic = new_topic(a, partitions=2, rf=3, min_insync_replicas="2")
            victim = a.describe_topics([topic])[topic].partitions[0].leader
        finally:
            a.close()
        errors: list[BaseException] = []
        acked: list[Any] = []
        values = [f"f{i:05d}".encode() for i in range(3000)]
        done = threading.Event()

        def produce() -> None:
            try:
                with Producer(conf(cl, linger_ms=2, retry_backoff_ms=50,
                                   request_timeout_ms=5000)) as p:
                    futs = []
                    for i, v in enumerate(values):
                        futs.append(p.send(topic, v, key=str(i % 2).encode()))
                        if i == 1000:
                            done.set()
                        if i % 200 == 199:
                            time.sleep(0.05)
                    p.flush(60)
                    acked.extend(f.result(60) for f in futs)
            except BaseException as exc:  # reported below
                errors.append(exc)
                done.set()

        t = threading.Thread(target=produce)
        t.start()
        assert done.wait(60)
        cl.kill_broker(victim)
        t.join(120)
        assert not errors, errors
        assert len(acked) == len(values)
        with Admin(conf(cl)) as a:
            new_leader = a.describe_topics([topic])[topic].partitions[0].leader
        assert new_leader not in (victim, -1)  # the producer followed the new leader
        assert [md.partition for md in acked].count(0) == len(values) // 2
        cl.restart_broker(victim)
        got = consume_all(cl, topic, 2, len(values), timeout=40)
        counts = Counter(r.value for r in got)
        assert set(counts) == set(values), f"{len(set(values) - set(counts))} acked records lost"
        assert max(counts.values()) == 1, "duplicates after failover"
        for part in (0, 1):
            seq = [r.value for r in sorted(got, key=lambda r: r.offset) if r.partition == part]
            assert seq == sorted(seq), "order within a partition changed"


def test_delivery_timeout_when_the_leader_is_gone(tmp_path: Path) -> None:
    with Cluster(2, data_dir=tmp_path, overrides=OVERRIDES) as cl:
        with Admin(conf(cl)) as a:
            topic = f"lonely-{uuid.uuid4().hex[:6]}"
            a.create_topics([NewTopic(topic, 1, replica_assignment={0: [1]})])
            a.wait_for_topics([topic])
        with Producer(conf(cl, delivery_timeout_ms=1500, request_timeout_ms=1000,
                           linger_ms=0)) as p:
            assert p.send(topic, b"before").result(10).offset == 0
            cl.kill_broker(1)  # the only replica: the partition has no leader now
            t0 = time.monotonic()
            fut = p.send(topic, b"after")
            with pytest.raises(KafkaError) as info:
                fut.result(30)
            assert info.value.retriable  # a timeout, not a broker refusal
            assert 1.0 < time.monotonic() - t0 < 10


# -- consumer positions ------------------------------------------------------------------------
def test_seek_positions_and_offset_lookups(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    with Producer(conf(cluster)) as p:
        for i in range(100):
            p.send(topic, f"{i}".encode(), timestamp_ms=1_600_000_000_000 + i * 1000)
    tp = TopicPartition(topic, 0)
    c = Consumer(conf(cluster, auto_offset_reset="earliest", max_poll_records=10))
    try:
        c.assign([tp])
        assert c.position(tp) == 0
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 100}
        c.seek(tp, 42)
        batch = c.poll(5)
        assert [r.offset for r in batch] == list(range(42, 52))
        assert c.position(tp) == 52
        c.seek_to_end(tp)
        assert c.position(tp) == 100
        assert c.poll(0.3) == []
        c.seek_to_beginning(tp)
        assert c.poll(5)[0].offset == 0
        found = c.offsets_for_times({tp: 1_600_000_000_000 + 57_500})
        assert found[tp] is not None and found[tp].offset == 58
        assert c.offsets_for_times({tp: 1_700_000_000_000})[tp] is None
        c.seek(tp, found[tp].offset)
        assert c.poll(5)[0].value == b"58"
        assert c.highwater(tp) == 100
        with pytest.raises(KafkaError, match="not assigned"):
            c.seek(TopicPartition(topic, 5), 0)
    finally:
        c.close()


@pytest.mark.parametrize("max_records", [1, 7, 500])
def test_max_poll_records(cluster: Cluster, admin: Admin, max_records: int) -> None:
    topic = new_topic(admin, partitions=3)
    with Producer(conf(cluster)) as p:
        for i in range(90):
            p.send(topic, f"{i}".encode(), partition=i % 3)
    c = Consumer(conf(cluster, auto_offset_reset="earliest", max_poll_records=max_records))
    try:
        c.assign([TopicPartition(topic, i) for i in range(3)])
        got: list[Any] = []
        sizes = []
        deadline = time.monotonic() + 20
        while len(got) < 90 and time.monotonic() < deadline:
            batch = c.poll(1)
            sizes.append(len(batch))
            got += batch
        assert len(got) == 90 and max(sizes) <= max_records
        if max_records < 90:
            assert max(sizes) == max_records
    finally:
        c.close()


def test_auto_offset_reset_latest_earliest_none(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    tp = TopicPartition(topic, 0)
    with Producer(conf(cluster)) as p:
        for i in range(10):
            p.send(topic, f"old{i}".encode())
    latest = Consumer(conf(cluster))  # auto.offset.reset=latest by default
    earliest = Consumer(conf(cluster, auto_offset_reset="earliest"))
    none = Consumer(conf(cluster, auto_offset_reset="none"))
    try:
        latest.assign([tp])
        earliest.assign([tp])
        none.assign([tp])
        assert latest.position(tp) == 10
        with pytest.raises(NoOffsetForPartitionError):
            none.poll(1)
        with Producer(conf(cluster)) as p:
            p.send(topic, b"new").result(10)
        got = latest.poll(5)
        assert [r.value for r in got] == [b"new"]
        got = []
        while len(got) < 11:
            got += earliest.poll(5)
        assert got[0].value == b"old0"
        none.seek(tp, 3)  # an explicit position needs no reset policy
        assert none.poll(5)[0].value == b"old3"
    finally:
        for c in (latest, earliest, none):
            c.close()


def test_offset_out_of_range_resets_or_raises(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    tp = TopicPartition(topic, 0)
    with Producer(conf(cluster)) as p:
        for i in range(5):
            p.send(topic, f"{i}".encode())
    c = Consumer(conf(cluster, auto_offset_reset="earliest"))
    strict = Consumer(conf(cluster, auto_offset_reset="none"))
    try:
        c.assign([tp])
        c.seek(tp, 1000)
        got = []
        while len(got) < 5:
            got += c.poll(5)
        assert got[0].offset == 0  # out of range -> reset to earliest
        strict.assign([tp])
        strict.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(20):
                strict.poll(0.5)
    finally:
        c.close()
        strict.close()


def test_pause_resume(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=2)
    with Producer(conf(cluster)) as p:
        for i in range(20):
            p.send(topic, f"{i}".encode(), partition=i % 2)
    c = Consumer(conf(cluster, auto_offset_reset="earliest"))
    try:
        t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        c.assign([t0, t1])
        c.pause(t1)
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(0.5)
        got += c.poll(0.5)
        assert {r.partition for r in got} == {0} and len(got) == 10
        c.resume(t1)
        more: list[Any] = []
        while len(more) < 10:
            more += c.poll(5)
        assert {r.partition for r in more} == {1}
    finally:
        c.close()


# -- admin -------------------------------------------------------------------------------------
def test_admin_topics_partitions_and_configs(cluster: Cluster, admin: Admin) -> None:
    name = f"adm-{uuid.uuid4().hex[:8]}"
    res = admin.create_topics([NewTopic(name, 2, 3, {"retention.ms": "123456",
                                                       "cleanup.policy": "delete"})])
    assert res == {name: None}
    admin.wait_for_topics([name])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(name, 2, 3)])
    errs = admin.create_topics([NewTopic(name, 2, 3)], raise_errors=False)
    assert errs[name] is not None and errs[name].name == "topic_already_exists"
    assert name in admin.list_topics()
    desc = admin.describe_topics([name])[name]
    assert [p.partition for p in desc.partitions] == [0, 1]
    assert all(len(p.replicas) == 3 and sorted(p.isr) == sorted(p.replicas)
               and p.leader in p.replicas for p in desc.partitions)
    assert desc.topic_id is not None

    cfg = admin.describe_configs([ConfigResource("topic", name)])[ConfigResource("topic", name)]
    assert cfg["retention.ms"].value == "123456" and not cfg["retention.ms"].is_default
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["segment.bytes"].is_default
    broker = admin.describe_configs([("broker", "1")])[ConfigResource("broker", "1")]
    assert broker["broker.id"].value == "1"

    assert admin.create_partitions({name: 4}) == {name: None}
    admin.wait_for_topics([name])
    assert len(admin.describe_topics([name])[name].partitions) == 4
    with pytest.raises(KafkaError, match="INVALID_PARTITIONS"):
        admin.create_partitions({name: 2})

    cluster_desc = admin.describe_cluster()
    assert [b.node_id for b in cluster_desc.brokers] == [0, 1, 2]
    assert cluster_desc.controller_id in (0, 1, 2)

    assert admin.delete_topics([name]) == {name: None}
    deadline = time.monotonic() + 20
    while name in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in admin.list_topics()
    with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        admin.delete_topics([f"nope-{uuid.uuid4().hex[:6]}"])


# -- consumer groups ---------------------------------------------------------------------------
def group_conf(cluster: Cluster, group: str, **extra: Any) -> dict[str, Any]:
    settings = {"group_id": group, "auto_offset_reset": "earliest",
                "session_timeout_ms": 6000, "heartbeat_interval_ms": 300, **extra}
    return conf(cluster, **settings)


def poll_until(consumers: list[Consumer], predicate: Any, timeout: float = 30,
               got: list[Any] | None = None) -> list[Any]:
    """Poll every consumer until predicate(all records so far) holds; returns the records."""
    got = [] if got is None else got
    deadline = time.monotonic() + timeout
    while not predicate(got) and time.monotonic() < deadline:
        for c in consumers:
            got += c.poll(0.2)
    return got


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_group_splits_partitions_and_commits(cluster: Cluster, admin: Admin,
                                             strategy: str) -> None:
    topic = new_topic(admin, partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Producer(conf(cluster)) as p:
        for i in range(200):
            p.send(topic, f"{i}".encode(), partition=i % 4)
    c1 = Consumer(group_conf(cluster, group, partition_assignment_strategy=strategy))
    c2 = Consumer(group_conf(cluster, group, partition_assignment_strategy=strategy))
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])

        def balanced(_got: list[Any]) -> bool:
            return len(c1.assignment()) == 2 and len(c2.assignment()) == 2
        got = poll_until([c1, c2], balanced)
        assert balanced(got), (c1.assignment(), c2.assignment())
        assert c1.assignment() | c2.assignment() == {TopicPartition(topic, i) for i in range(4)}
        got = poll_until([c1, c2], lambda g: len({r.value for r in g}) >= 200, got=got)
        assert {r.value for r in got} == {f"{i}".encode() for i in range(200)}
        c1.commit()
        done = threading.Event()
        outcome: list[Any] = []

        def on_commit(err: Any, offsets: Any) -> None:
            outcome.append((err, offsets))
            done.set()
        c2.commit_async(callback=on_commit)
        assert done.wait(10) and outcome[0][0] is None
        assert {tp.partition for tp in outcome[0][1]} == {tp.partition for tp in c2.assignment()}
        committed = c1.committed([TopicPartition(topic, i) for i in range(4)])
        assert {tp: om.offset for tp, om in committed.items() if om} == {
            TopicPartition(topic, i): 50 for i in range(4)}
    finally:
        c1.close()
        c2.close()
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {i: 50 for i in range(4)}


def test_group_resumes_from_committed_and_rebalances_on_leave(cluster: Cluster,
                                                               admin: Admin) -> None:
    topic = new_topic(admin, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Producer(conf(cluster)) as p:
        for i in range(40):
            p.send(topic, f"a{i}".encode(), partition=i % 2)
    assigned: list[list[TopicPartition]] = []
    revoked: list[list[TopicPartition]] = []
    c1 = Consumer(group_conf(cluster, group, enable_auto_commit=False))
    c1.subscribe([topic], on_assign=assigned.append, on_revoke=revoked.append)
    got = poll_until([c1], lambda g: len(g) >= 40)
    assert len(got) == 40
    c1.commit()
    c2 = Consumer(group_conf(cluster, group, enable_auto_commit=False))
    c2.subscribe([topic])
    poll_until([c1, c2], lambda _g: len(c2.assignment()) == 1 and len(c1.assignment()) == 1)
    assert len(c1.assignment()) == 1 and len(c2.assignment()) == 1
    assert revoked and assigned[-1] != assigned[0]
    c2.close()  # LeaveGroup: c1 gets both partitions back without waiting for a timeout
    t0 = time.monotonic()
    poll_until([c1], lambda _g: len(c1.assignment()) == 2, timeout=10)
    assert len(c1.assignment()) == 2 and time.monotonic() - t0 < 5
    c1.close()
    with Producer(conf(cluster)) as p:
        for i in range(10):
            p.send(topic, f"b{i}".encode(), partition=i % 2)
    c3 = Consumer(group_conf(cluster, group))
    try:
        c3.subscribe([topic])
        got = poll_until([c3], lambda g: len(g) >= 10)
        got += c3.poll(0.5)
        assert sorted(r.value for r in got) == sorted(f"b{i}".encode() for i in range(10))
    finally:
        c3.close()  # auto commit on close
    assert sum(om.offset for om in admin.list_consumer_group_offsets(group).values()) == 50


def test_group_reset_none_and_auto_commit(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Producer(conf(cluster)) as p:
        for i in range(5):
            p.send(topic, f"{i}".encode())
    strict = Consumer(group_conf(cluster, group, auto_offset_reset="none"))
    try:
        strict.subscribe([topic])
        with pytest.raises(NoOffsetForPartitionError):
            for _ in range(50):
                strict.poll(0.2)
    finally:
        strict.close()
    auto = Consumer(group_conf(cluster, group, auto_commit_interval_ms=200))
    try:
        auto.subscribe([topic])
        got = poll_until([auto], lambda g: len(g) >= 5)
        assert len(got) == 5
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            auto.poll(0.1)  # auto commit happens from poll
            om = auto.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
            if om is not None and om.offset == 5:
                break
        assert om is not None and om.offset == 5
    finally:
        auto.close(autocommit=False)
    strict = Consumer(group_conf(cluster, group, auto_offset_reset="none"))
    try:
        strict.subscribe([topic])
        with Producer(conf(cluster)) as p:
            p.send(topic, b"after").result(10)
        got = poll_until([strict], lambda g: len(g) >= 1)
        assert [r.value for r in got] == [b"after"]  # from the committed offset, no reset
    finally:
        strict.close()


def test_commit_after_the_group_moved_on_fails(cluster: Cluster, admin: Admin) -> None:
    """Java's CommitFailedException case: a member that stops polling for longer than
    max.poll.interval.ms is dropped, the group rebalances without it, and its commit fails
    (client-side once it knows, broker-side ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID otherwise);
    its next poll() rejoins."""
    topic = new_topic(admin, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        cfg = group_conf(cluster, group, enable_auto_commit=False, max_poll_interval_ms=1500)
        async with AsyncConsumer(cfg) as c1, AsyncConsumer(cfg) as c2:
            c1.subscribe([topic])
            while len(c1.assignment()) < 2:
                await c1.poll(0.2)
            old_generation, old_member = c1.group.generation, c1.group.member_id
            c2.subscribe([topic])
            deadline = time.monotonic() + 20
            while len(c2.assignment()) < 2 and time.monotonic() < deadline:
                await c2.poll(0.2)  # c1 does not poll: the group goes on without it
            assert len(c2.assignment()) == 2
            assert c2.group.generation > old_generation
            with pytest.raises(CommitFailedError):
                await c1.commit({TopicPartition(topic, 0): 1})
            c1.group.generation, c1.group.member_id = old_generation, old_member
            with pytest.raises(CommitFailedError) as info:
                await c1.group.commit({TopicPartition(topic, 0): OffsetAndMetadata(1)},
                                      asyncio.get_running_loop().time() + 10)
            assert info.value.code in (22, 25)  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID
            c1.group.reset_generation()
            deadline = time.monotonic() + 20
            while (len(c1.assignment()) != 1 or len(c2.assignment()) != 1) \
                    and time.monotonic() < deadline:
                await c1.poll(0.1)
                await c2.poll(0.1)
            assert len(c1.assignment()) == 1 and len(c2.assignment()) == 1
    asyncio.run(body())


def test_admin_groups(cluster: Cluster, admin: Admin) -> None:
    topic = new_topic(admin, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = Consumer(group_conf(cluster, group, client_id="admin-test"))
    try:
        c.subscribe([topic])
        poll_until([c], lambda _g: len(c.assignment()) == 2)
        assert group in [g.group_id for g in admin.list_groups()]
        desc = admin.describe_groups([group])[group]
        assert desc.protocol_type == "consumer" and desc.protocol == "range"
        assert desc.state == "Stable" and len(desc.members) == 1
        m = desc.members[0]
        assert m.client_id == "admin-test" and m.subscription == [topic]
        assert sorted(m.assignment) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        c.commit({TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0})
    finally:
        c.close()
    admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 1): 0})
    assert admin.delete_groups([group]) == {group: None}
    assert group not in [g.group_id for g in admin.list_groups()]


def test_oldest_protocol_versions(cluster: Cluster, admin: Admin,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every API at the lowest version this client speaks (what an old broker would force):
    the version-agnostic request building and response reading work at both ends."""
    from odradek.client import connection

    for key, (lo, _hi) in list(connection.CLIENT_VERSIONS.items()):
        monkeypatch.setitem(connection.CLIENT_VERSIONS, key, (lo, lo))
    topic = f"old-{uuid.uuid4().hex[:8]}"
    with Admin(conf(cluster)) as a:
        a.create_topic(topic, 2, 3, {"retention.ms": "3600000"})
        cfg = a.describe_configs([("topic", topic)])[ConfigResource("topic", topic)]
        assert cfg["retention.ms"].value == "3600000"
    with Producer(conf(cluster, compression_type="gzip")) as p:
        mds = [p.send(topic, f"v{i}".encode(), key=f"k{i}".encode(),
                      headers=[("h", b"1")]).result(10) for i in range(20)]
    assert all(md.offset >= 0 for md in mds)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = Consumer(conf(cluster, auto_offset_reset="earliest", group_id=group))
    try:
        c.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += c.poll(0.2)
        assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(20))
        assert all(r.headers == [("h", b"1")] for r in got)
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert sum(c.end_offsets(tps).values()) == 20
        c.commit()
        assert sum(om.offset for om in c.committed(tps).values() if om) == 20
    finally:
        c.close()

