"""odradek.client's transactions against an in-process 3-broker cluster: the transactional
producer (commit, abort, fencing by a newer producer, an abortable error), read_committed and
read_uncommitted consumers, send_offsets_to_transaction in a consume-transform-produce loop,
the admin's transaction calls, and `odradek transactions` (list, describe, describe-producers,
find-hanging, abort of a hanging transaction made with a raw producer)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.cli import main
from odradek.client import Admin, Consumer, KafkaError, NewTopic, Producer, TopicPartition
from odradek.client.errors import IllegalStateError, ProducerFencedError
from odradek.client.types import AbortTransactionSpec, ConsumerGroupMetadata
from odradek.cluster import Cluster
from tests.integration.cluster_fixtures import module_admin, module_cluster

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "txn-client", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


def topic(admin: Admin, name: str, partitions: int = 3) -> str:
    admin.create_topics([NewTopic(name, partitions, 3)])
    admin.wait_for_topics([name])
    return name


def producer(cluster: Cluster, tid: str, **cfg: Any) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid,
                     "linger.ms": 0, **cfg})


def consume(cluster: Cluster, name: str, level: str, expect: int, partitions: int = 3,
            timeout: float = 20.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "isolation.level": level,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(name, p) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(got) < expect:
            got += [r.value for r in c.poll(0.2)]
        # a little longer: nothing beyond what was expected may come
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            got += [r.value for r in c.poll(0.1)]
        return got
    finally:
        c.close()


def eventually(fn: Any, ok: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fn()
        except KafkaError as exc:  # e.g. UNSTABLE_OFFSET_COMMIT while markers are written
            value = exc
        if not isinstance(value, Exception) and ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; last: {value!r}")
        time.sleep(0.05)


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_commit_abort_and_read_committed(cluster: Cluster, admin: Admin) -> None:
    name = topic(admin, "txn-basic")
    p = producer(cluster, "basic")
    try:
        with pytest.raises(IllegalStateError, match="before completing a call to "
                           "initTransactions"):
            p.send(name, b"x")
        p.init_transactions(30)
        with pytest.raises(IllegalStateError, match=r"Cannot add .* to transaction while in "
                           r"state  READY"):
            p.send(name, b"x")
        p.begin_transaction()
        for v in values("c", 12):
            p.send(name, v, key=v)
        p.commit_transaction(30)
        p.begin_transaction()
        aborted = [p.send(name, v, key=v) for v in values("a", 9)]
        p.flush()
        p.abort_transaction(30)
        assert all(h.exception() is None for h in aborted)  # written, then aborted
        p.begin_transaction()
        for v in values("d", 6):
            p.send(name, v, key=v)
        p.commit_transaction(30)
        # an open transaction: its records stay invisible to read_committed
        p.begin_transaction()
        for v in values("o", 3):
            p.send(name, v, key=v)
        p.flush()
        committed = sorted(values("c", 12) + values("d", 6))
        assert sorted(consume(cluster, name, "read_committed", 18)) == committed
        assert sorted(consume(cluster, name, "read_uncommitted", 30)) == sorted(
            committed + values("a", 9) + values("o", 3))
        # the LSO is the first offset of the open transaction: end_offsets under read_committed
        # stop there, the high watermark is further
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "isolation.level": "read_committed"})
        u = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            tps = [TopicPartition(name, i) for i in range(3)]
            lso, hw = c.end_offsets(tps), u.end_offsets(tps)
            assert all(lso[tp] <= hw[tp] for tp in tps) and lso != hw
        finally:
            c.close()
            u.close()
        listed = admin.list_transactions()
        assert ("basic", "Ongoing") in {(t.transactional_id, t.state)
                                       for ts in listed.values() for t in ts}
        d = admin.describe_transactions(["basic"])["basic"]
        assert d.state == "Ongoing" and d.transaction_start_time_ms > 0
        assert {tp.topic for tp in d.topic_partitions} == {name}
        p.abort_transaction(30)
        assert sorted(consume(cluster, name, "read_committed", 18)) == committed
    finally:
        p.close()


def test_a_newer_producer_fences_the_older(cluster: Cluster, admin: Admin) -> None:
    name = topic(admin, "txn-fence")
    old = producer(cluster, "fenced-id")
    new = producer(cluster, "fenced-id")
    try:
        old.init_transactions(30)
        old.begin_transaction()
        old.send(name, b"zombie", partition=0)
        old.flush()
        new.init_transactions(30)  # bumps the epoch, aborts the old one's transaction
        with pytest.raises(ProducerFencedError):
            old.commit_transaction(30)
        with pytest.raises(ProducerFencedError):
            old.begin_transaction()  # fatal: nothing more works
        new.begin_transaction()
        new.send(name, b"alive", partition=0)
        new.commit_transaction(30)
        assert consume(cluster, name, "read_committed", 1) == [b"alive"]
    finally:
        old.close()
        new.close()


def test_consume_transform_produce_with_send_offsets(cluster: Cluster, admin: Admin) -> None:
    src, dst = topic(admin, "txn-src", 1), topic(admin, "txn-dst", 1)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as plain:
        for v in values("in", 10):
            plain.send(src, v)
    group = "txn-app"
    cons = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed"})
    p = producer(cluster, "ctp")
    try:
        p.init_transactions(30)
        cons.subscribe([src])
        batch: list[Any] = []
        deadline = time.monotonic() + 30
        while len(batch) < 5 and time.monotonic() < deadline:
            batch += cons.poll(0.2, max_records=5 - len(batch))
        meta = cons.consumer_group_metadata()
        assert isinstance(meta, ConsumerGroupMetadata) and meta.group_id == group
        assert meta.generation_id > 0 and meta.member_id
        # first round aborted: neither output nor offsets stay
        p.begin_transaction()
        for r in batch:
            p.send(dst, r.value.upper())
        p.send_offsets_to_transaction({TopicPartition(src, 0): batch[-1].offset + 1}, meta, 30)
        p.abort_transaction(30)
        eventually(lambda: admin.list_consumer_group_offsets(group), lambda found: found == {})
        # second round committed: output and offsets together
        p.begin_transaction()
        for r in batch:
            p.send(dst, r.value.upper())
        p.send_offsets_to_transaction({TopicPartition(src, 0): batch[-1].offset + 1}, meta, 30)
        p.commit_transaction(30)
        # the markers are written after EndTxn answered: the offsets become stable soon after
        committed = eventually(lambda: admin.list_consumer_group_offsets(group),
                               lambda found: TopicPartition(src, 0) in found)
        assert committed[TopicPartition(src, 0)].offset == 5
        assert consume(cluster, dst, "read_committed", 5, partitions=1) == \
            [v.upper() for v in values("in", 5)]
        # a stale generation is refused: an abortable error
        p.begin_transaction()
        stale = ConsumerGroupMetadata(group, meta.generation_id + 100, meta.member_id)
        with pytest.raises(KafkaError, match="consumer group metadata mismatch"):
            p.send_offsets_to_transaction({TopicPartition(src, 0): 7}, stale, 30)
        with pytest.raises(KafkaError, match="in an error state"):
            p.commit_transaction(30)
        p.abort_transaction(30)  # the way out of an abortable error; the producer goes on
        p.begin_transaction()
        p.commit_transaction(30)
    finally:
        cons.close()
        p.close()


def run_tool(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def test_transactions_tool(cluster: Cluster, admin: Admin,
                           capsys: pytest.CaptureFixture[str]) -> None:
    name = topic(admin, "txn-tool", 1)
    bs = ["transactions", "--bootstrap-server", cluster.bootstrap_servers]
    p = producer(cluster, "tool-id")
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.send(name, b"open", partition=0)
        p.flush()
        code, out, err = run_tool(capsys, *bs, "list")
        assert code == 0, err
        assert out[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                  "TransactionState"]
        assert any(r.split()[0] == "tool-id" and r.split()[3] == "Ongoing" for r in out[1:])
        code, out, err = run_tool(capsys, *bs, "describe", "--transactional-id", "tool-id")
        assert code == 0, err
        row = out[1].split()
        assert row[1:5] == ["tool-id", str(p._p.producer_id), str(p._p.producer_epoch),
                            "Ongoing"] and row[-1] == f"{name}-0"
        code, out, err = run_tool(capsys, *bs, "describe", "--transactional-id", "nope")
        assert code == 1 and "Failed to describe transaction state of transactional-id " \
            "`nope`" in err
        # an ongoing transaction of a known transactional id is not hanging
        code, out, err = run_tool(capsys, *bs, "find-hanging", "--topic", name,
                                  "--max-transaction-timeout", "0")
        assert code == 0, err
        assert out == [out[0]]
        code, out, err = run_tool(capsys, *bs, "describe-producers", "--topic", name,
                                  "--partition", "0")
        assert code == 0, err
        rows = [r.split() for r in out[1:]]
        assert [r[0] for r in rows] == [str(p._p.producer_id)] and rows[0][-1] == "0"
        p.abort_transaction(30)
    finally:
        p.close()


def test_abort_a_hanging_transaction(cluster: Cluster, admin: Admin) -> None:
    """A transaction whose coordinator never heard of (a transactional batch written with a
    producer id no coordinator knows) hangs; Admin.abort_transaction's WriteTxnMarkers ends it
    and read_committed consumers move past it."""
    name = topic(admin, "txn-hanging", 1)
    p = producer(cluster, "hang-source")
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.send(name, b"stuck", partition=0)
        p.flush()
        pid, epoch = p._p.producer_id, p._p.producer_epoch
        # The coordinator could still end it; the admin's abort writes the marker directly.
        admin.abort_transaction(AbortTransactionSpec(TopicPartition(name, 0), pid, epoch, 0))
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "isolation.level": "read_committed"})
        try:
            tp = TopicPartition(name, 0)
            deadline = time.monotonic() + 20
            while c.end_offsets([tp])[tp] < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert c.end_offsets([tp])[tp] == 2  # the data and the ABORT marker: stable
        finally:
            c.close()
        assert consume(cluster, name, "read_committed", 0, partitions=1, timeout=1) == []
    finally:
        p.close()


def test_spark_source_read_committed(cluster: Cluster, admin: Admin) -> None:
    """kafka.isolation.level=read_committed for the Spark source: the driver's latest offsets
    are the LSOs, an executor's range read returns committed records only."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from odradek.spark.offsets import OffsetRange
    from odradek.spark.reader import read_ranges
    from odradek.spark.source import OffsetReader

    name = topic(admin, "txn-spark", 1)
    p = producer(cluster, "spark-writer")
    try:
        p.init_transactions(30)
        for prefix, commit in (("c", True), ("a", False), ("d", True)):
            p.begin_transaction()
            for v in values(prefix, 4):
                p.send(name, v, partition=0)
            if commit:
                p.commit_transaction(30)
            else:
                p.flush()
                p.abort_transaction(30)
        p.begin_transaction()
        p.send(name, b"open", partition=0)
        p.flush()
        kafka = {"bootstrap.servers": cluster.bootstrap_servers,
                 "isolation.level": "read_committed"}
        with OffsetReader(kafka) as offsets:
            # 3 transactions of 4 records and their markers: 15; the open one starts there
            latest = eventually(lambda: offsets.latest([(name, 0)]),
                                lambda found: found[(name, 0)] == 15)
        with OffsetReader({"bootstrap.servers": cluster.bootstrap_servers}) as offsets:
            assert offsets.latest([(name, 0)])[(name, 0)] == 16  # the high watermark
        batches = list(read_ranges([OffsetRange(name, 0, 0, latest[(name, 0)])], kafka,
                                   fail_on_data_loss=True, include_headers=False))
        got = [v for b in batches for v in b.column("value").to_pylist()]
        assert got == values("c", 4) + values("d", 4)
        p.abort_transaction(30)
    finally:
        p.close()


def test_list_duration_filter(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """--duration-filter needs ListTransactions v1 (Kafka 3.8): refused with Kafka's message by
    brokers that only speak v0."""
    code, out, err = run_tool(capsys, "transactions", "--bootstrap-server",
                              cluster.bootstrap_servers, "list", "--duration-filter", "1000")
    if code == 0:  # the brokers speak v1
        assert out[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                  "TransactionState"]
    else:
        assert err.startswith("Failed to list transactions: Duration filter can be set only "
                              "when using API version 1 or higher.")


def test_find_and_abort_a_hanging_transaction_with_the_tool(
        cluster: Cluster, admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    """A transactional batch of a producer id no coordinator knows (written by hand, as a
    producer whose coordinator lost its state would leave it) keeps the LSO back: find-hanging
    lists it, `abort --start-offset` ends it, read_committed readers then see past it."""
    import asyncio
    import dataclasses

    from odradek.protocol.records import build_batch
    from tests.integration.broker_harness import produce
    from tests.wire import WireClient

    name = topic(admin, "txn-hung", 1)
    leader = admin.describe_topics([name])[name].partitions[0].leader
    node = next(b for b in admin.describe_cluster().brokers if b.node_id == leader)
    ghost = 777_777

    async def write() -> Any:
        c = await WireClient.connect(node.host, node.port)
        try:
            batch = build_batch([(None, b"ghost")], producer_id=ghost, producer_epoch=0,
                                base_sequence=0, is_transactional=True)
            req = dataclasses.replace(produce(name, 0, batch), transactional_id="ghost-id")
            return await c.request(req)
        finally:
            await c.close()
    resp = asyncio.run(write())
    assert resp.responses[0].partition_responses[0].error_code == 0
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as plain:
        plain.send(name, b"after", partition=0).result(10)
    assert consume(cluster, name, "read_committed", 0, partitions=1, timeout=1) == []

    bs = ["transactions", "--bootstrap-server", cluster.bootstrap_servers]
    code, out, err = run_tool(capsys, *bs, "find-hanging", "--topic", name,
                              "--max-transaction-timeout", "0")
    assert code == 0, err
    assert out[0].split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                              "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                              "Duration(min)"]
    assert [r.split()[:6] for r in out[1:]] == [[name, "0", str(ghost), "0", "-1", "0"]]
    code, out, err = run_tool(capsys, *bs, "find-hanging", "--broker-id", str(leader),
                              "--max-transaction-timeout", "0")
    assert code == 0 and any(r.split()[:3] == [name, "0", str(ghost)] for r in out[1:]), err
    code, out, err = run_tool(capsys, *bs, "abort", "--topic", name, "--partition", "0",
                              "--start-offset", "5")
    assert code == 1 and "Could not find any open transactions starting at offset 5" in err
    code, out, err = run_tool(capsys, *bs, "abort", "--topic", name, "--partition", "0",
                              "--start-offset", "0")
    assert (code, out) == (0, []), err
    assert consume(cluster, name, "read_committed", 1, partitions=1) == [b"after"]
    code, out, err = run_tool(capsys, *bs, "find-hanging", "--topic", name, "--partition", "0",
                              "--max-transaction-timeout", "0")
    assert code == 0 and out[1:] == [], err


def test_a_failed_batch_is_abortable_and_the_next_transaction_gets_a_new_epoch(
        cluster: Cluster, admin: Admin) -> None:
    """A record the broker refuses (larger than the topic's max.message.bytes) puts the
    transaction in the abortable error state: the commit raises, the abort succeeds, the next
    epoch is taken (sequences restart) and the next transaction commits."""
    admin.create_topics([NewTopic("txn-small", 1, 3, {"max.message.bytes": "300"})])
    admin.wait_for_topics(["txn-small"])
    p = producer(cluster, "abortable")
    try:
        p.init_transactions(30)
        epoch = p._p.producer_epoch
        p.begin_transaction()
        big = p.send("txn-small", b"x" * 1000, partition=0)
        p.flush()
        assert "MESSAGE_TOO_LARGE" in str(big.exception())
        with pytest.raises(KafkaError, match="in an error state"):
            p.commit_transaction(30)
        with pytest.raises(KafkaError, match="in an error state"):
            p.send("txn-small", b"more", partition=0)
        p.abort_transaction(30)
        assert p._p.producer_epoch == epoch + 1  # KIP-360: a fresh epoch after the failure
        p.begin_transaction()
        p.send("txn-small", b"after", partition=0)
        p.commit_transaction(30)
        assert consume(cluster, "txn-small", "read_committed", 1, partitions=1) == [b"after"]
    finally:
        p.close()
