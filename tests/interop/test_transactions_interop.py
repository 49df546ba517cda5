"""Kafka transactions (KIP-98, KIP-447) with real clients against one `odradek broker` process.

* Transactional producers of confluent-kafka, kafka-python (>= 2.1 has one; 3.0.12 here) and
  aiokafka (0.14 here) commit and abort transactions spanning several partitions. Consumers of
  every client, kcat (``-X isolation.level=...``) and odradek's own Consumer read the topics
  back: read_committed sees
  exactly the committed records, read_uncommitted sees everything (the aborted records too). The
  high watermark counts one control record (a transaction marker) per partition per transaction,
  and the last stable offset (ListOffsets read_committed) reaches it once nothing is open.
* Consume-transform-produce with ``send_offsets_to_transaction`` in each of the three clients: a
  first transaction is aborted (its output invisible to read_committed, its offsets not
  committed), the loop rewinds and then commits batch after batch; the output read with
  read_committed holds every input value exactly once and the group's committed offsets are the
  input's end.
* A second producer with the same transactional.id fences the first: its open transaction is
  aborted, and the first producer's next operation fails with a fatal fenced error.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .clients import KCAT, In, Out, create_topic, produce_confluent
from .conftest import BrokerProcess, free_port, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

PARTITIONS = 3
PER_PARTITION = 20  # records per partition per transaction
# A single broker: the transaction log and the offsets topic cannot have 3 replicas.
TXN_OVERRIDES = {"transaction.state.log.replication.factor": "1",
                 "transaction.state.log.min.isr": "1",
                 "offsets.topic.replication.factor": "1",
                 # the coordinator looks for timed-out transactions twice a second
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
FENCED_NAMES = {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn-broker"), overrides=TXN_OVERRIDES)
    try:
        b.start()
        yield b
    finally:
        b.close()


def bootstrap(b: BrokerProcess) -> str:
    assert b.bootstrap is not None
    return b.bootstrap


def txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- the transactions every producer writes ------------------------------------------------------
@dataclass(frozen=True)
class Txn:
    commit: bool
    values: tuple[tuple[int, bytes], ...]  # (partition, value)


def txn_plan(prefix: str) -> list[Txn]:
    """Commit, abort, commit, abort, commit: each transaction writes PER_PARTITION records to
    every partition; values say which transaction they belong to and whether it commits."""
    plan = []
    for t, commit in enumerate((True, False, True, False, True)):
        tag = "c" if commit else "a"
        plan.append(Txn(commit, tuple((p, f"{prefix}-{tag}{t}-p{p}-{i}".encode())
                                      for p in range(PARTITIONS) for i in range(PER_PARTITION))))
    return plan


def committed_values(plan: list[Txn]) -> list[bytes]:
    return [v for t in plan if t.commit for _p, v in t.values]


def all_values(plan: list[Txn]) -> list[bytes]:
    return [v for t in plan for _p, v in t.values]


def write_confluent(bs: str, topic: str, plan: list[Txn]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id("cf"), "linger.ms": 5})
    p.init_transactions(30)
    for t in plan:
        p.begin_transaction()
        for i, (part, value) in enumerate(t.values):
            p.produce(topic, value=value, key=b"k", partition=part)
            if i % 50 == 0:
                p.poll(0)
        if t.commit:
            p.commit_transaction(30)
        else:
            p.flush(30)  # the aborted records reach the log before the abort marker
            p.abort_transaction(30)
    assert p.flush(10) == 0


def write_kafka_python(bs: str, topic: str, plan: list[Txn]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id("kp"), linger_ms=5)
    try:
        p.init_transactions()
        for t in plan:
            p.begin_transaction()
            futures = [p.send(topic, key=b"k", value=v, partition=part) for part, v in t.values]
            p.flush(30)
            assert all(f.get(10) is not None for f in futures)
            if t.commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(5)


def write_aiokafka(bs: str, topic: str, plan: list[Txn]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id("aio"),
                             linger_ms=5)
        await p.start()
        try:
            for t in plan:
                await p.begin_transaction()
                futs = [await p.send(topic, key=b"k", value=v, partition=part)
                        for part, v in t.values]
                await asyncio.wait_for(asyncio.gather(*futs), 30)
                if t.commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())


WRITERS: dict[str, Callable[[str, str, list[Txn]], None]] = {
    "confluent": write_confluent, "kafka-python": write_kafka_python, "aiokafka": write_aiokafka}


# -- consumers with an isolation level ----------------------------------------------------------
def read_confluent(bs: str, topic: str, expected: int, isolation: str,
                   timeout: float = 20) -> list[In]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": f"rd-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    out: list[In] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, f"confluent-kafka consumer error: {m.error()}"
            out.append(In(m.partition(), m.offset(), m.key(), m.value(), ()))
    finally:
        c.close()
    return out


def read_kafka_python(bs: str, topic: str, expected: int, isolation: str,
                      timeout: float = 20) -> list[In]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bs, isolation_level=isolation)
    out: list[In] = []
    try:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        c.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for _tp, msgs in c.poll(500).items():
                out.extend(In(m.partition, m.offset, m.key, m.value, ()) for m in msgs)
    finally:
        c.close()
    return out


def read_aiokafka(bs: str, topic: str, expected: int, isolation: str,
                  timeout: float = 20) -> list[In]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[In]:
        c = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level=isolation)
        await c.start()
        out: list[In] = []
        try:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await c.seek_to_beginning()
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                for _tp, msgs in (await c.getmany(timeout_ms=500)).items():
                    out.extend(In(m.partition, m.offset, m.key, m.value, ()) for m in msgs)
        finally:
            await c.stop()
        return out

    return asyncio.run(run())


def read_kcat(bs: str, topic: str, expected: int, isolation: str,
              timeout: float = 20) -> list[In]:
    """kcat -C -e: up to the end of each partition (for read_committed, the LSO)."""
    res = subprocess.run([KCAT, "-C", "-b", bs, "-t", topic, "-o", "beginning", "-e", "-q",
                          "-X", f"isolation.level={isolation}", "-f", "%p\t%o\t%s\n"],
                         capture_output=True, timeout=timeout)
    assert res.returncode == 0, f"kcat -C exited {res.returncode}: {res.stderr.decode()}"
    out = []
    for line in res.stdout.split(b"\n"):
        if line:
            p, o, v = line.split(b"\t")
            out.append(In(int(p), int(o), None, v, ()))
    return out


def read_odradek(bs: str, topic: str, expected: int, isolation: str,
                 timeout: float = 20) -> list[In]:
    """odradek's own Consumer (odradek.client), the fifth reader: its read_committed
    filtering against what the real clients wrote."""
    from odradek.client import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "enable.auto.commit": False,
                  "isolation.level": isolation})
    out: list[In] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(In(r.partition, r.offset, r.key, r.value, ()) for r in c.poll(0.5))
    finally:
        c.close(autocommit=False)
    return out


READERS: dict[str, Callable[..., list[In]]] = {
    "confluent": read_confluent, "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka, "kcat": read_kcat, "odradek": read_odradek}


def list_offsets(bs: str, topic: str, isolation: str) -> dict[int, int]:
    """partition -> the latest offset ListOffsets answers with this isolation level (for
    read_committed Kafka answers the last stable offset, for read_uncommitted the HW)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": f"lo-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


# -- commit and abort, read by every client ------------------------------------------------------
@dataclass
class Written:
    topic: str
    plan: list[Txn]


@pytest.fixture(scope="module", params=sorted(WRITERS))
def written(request: pytest.FixtureRequest, txn_broker: BrokerProcess) -> Written:
    """A topic holding one writer client's five transactions (three committed, two aborted)."""
    bs = bootstrap(txn_broker)
    topic = unique_topic(f"txn-{request.param}")
    create_topic(bs, topic, PARTITIONS)
    plan = txn_plan(request.param)
    WRITERS[request.param](bs, topic, plan)
    return Written(topic, plan)


@pytest.mark.parametrize("isolation", [READ_COMMITTED, READ_UNCOMMITTED])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_consumers_see_committed_or_everything(txn_broker: BrokerProcess, written: Written,
                                               reader: str, isolation: str) -> None:
    bs = bootstrap(txn_broker)
    want = (committed_values(written.plan) if isolation == READ_COMMITTED
            else all_values(written.plan))
    got = READERS[reader](bs, written.topic, len(want), isolation)
    values = Counter(r.value for r in got)
    dupes = {v: n for v, n in values.items() if n > 1}
    assert not dupes, f"{reader} {isolation}: read twice: {list(dupes)[:5]}"
    extra = set(values) - set(want)
    missing = set(want) - set(values)
    assert not extra, f"{reader} {isolation} read {len(extra)} records it must not see, " \
                      f"e.g. {sorted(extra)[:3]}"  # type: ignore[type-var]
    assert not missing, f"{reader} {isolation} missed {len(missing)} records, " \
                        f"e.g. {sorted(missing)[:3]}"  # type: ignore[type-var]
    # Per partition, in the order written (a transaction's records are contiguous).
    for p in range(PARTITIONS):
        order = [r.value for r in sorted(got, key=lambda r: r.offset) if r.partition == p]
        assert order == [v for t in written.plan for q, v in t.values if q == p
                         and v in set(want)], f"{reader} {isolation}: p{p} out of order"


def test_markers_and_last_stable_offset(txn_broker: BrokerProcess, written: Written) -> None:
    """Each transaction left one control record per partition: HW = records + markers, and
    with nothing open the LSO (ListOffsets read_committed) equals the HW."""
    bs = bootstrap(txn_broker)
    hw = list_offsets(bs, written.topic, READ_UNCOMMITTED)
    lso = list_offsets(bs, written.topic, READ_COMMITTED)
    n_txns = len(written.plan)
    assert hw == {p: n_txns * (PER_PARTITION + 1) for p in range(PARTITIONS)}, hw
    assert lso == hw, f"LSO {lso} != HW {hw} with no transaction open"


def test_open_transaction_holds_back_the_lso(txn_broker: BrokerProcess) -> None:
    """While a transaction is open its records are above the LSO: read_committed consumers
    see none of them (and nothing written after them by another producer) until the commit."""
    from confluent_kafka import Producer

    bs = bootstrap(txn_broker)
    topic = unique_topic("txn-open")
    create_topic(bs, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id("open")})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=f"open-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    # A non-transactional record after the open transaction, in the same partition.
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, value=b"plain-after", partition=0)
    plain.produce(topic, value=b"plain-p1", partition=1)
    assert plain.flush(30) == 0
    hw = list_offsets(bs, topic, READ_UNCOMMITTED)
    lso = list_offsets(bs, topic, READ_COMMITTED)
    assert lso[0] == 0 and hw[0] >= 30, f"open transaction: LSO {lso}, HW {hw}"
    # read_committed sees partition 1's record, nothing of partition 0 (all above the LSO).
    seen = read_confluent(bs, topic, 2, READ_COMMITTED, timeout=4)
    assert [r.value for r in seen] == [b"plain-p1"], seen
    p.commit_transaction(30)
    lso = list_offsets(bs, topic, READ_COMMITTED)
    hw = list_offsets(bs, topic, READ_UNCOMMITTED)
    assert lso == hw, f"after the commit: LSO {lso}, HW {hw}"
    got = read_confluent(bs, topic, 32, READ_COMMITTED)
    assert sorted(r.value for r in got) == sorted(  # type: ignore[type-var]
        [f"open-{i}".encode() for i in range(30)] + [b"plain-after", b"plain-p1"])


def test_coordinator_aborts_a_timed_out_transaction(txn_broker: BrokerProcess) -> None:
    """A producer that leaves its transaction open past transaction.timeout.ms: the coordinator
    aborts it (its records never visible read_committed, the LSO moves on to the HW), and the
    producer's late commit fails."""
    from confluent_kafka import KafkaException, Producer

    bs = bootstrap(txn_broker)
    topic = unique_topic("txn-timeout")
    create_topic(bs, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id("timeout"),
                  "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=f"late-{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    assert list_offsets(bs, topic, READ_COMMITTED) == {q: 0 for q in range(PARTITIONS)}
    deadline = time.monotonic() + 20
    while True:  # the abort markers: the LSO reaches the HW, past the 10 records each
        lso, hw = list_offsets(bs, topic, READ_COMMITTED), list_offsets(bs, topic,
                                                                        READ_UNCOMMITTED)
        if lso == hw and all(v > 10 for v in lso.values()):
            break
        assert time.monotonic() < deadline, f"not aborted after 20 s: LSO {lso}, HW {hw}"
        time.sleep(0.2)
    assert hw == {q: 11 for q in range(PARTITIONS)}, f"one ABORT marker each: {hw}"
    assert read_confluent(bs, topic, 1, READ_COMMITTED, timeout=3) == []
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert read_confluent(bs, topic, 1, READ_COMMITTED, timeout=3) == []


def test_open_transaction_survives_a_broker_restart(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    """kill -9 of the (only) broker while a transaction is open with records in the log: after
    the restart the coordinator has reloaded it from `__transaction_state`, the partitions'
    LSO is still held back by it (rebuilt from the log), and the producer commits it."""
    from confluent_kafka import Producer

    b = broker_factory(port=free_port(), overrides=TXN_OVERRIDES)  # fixed port: reconnects
    bs = bootstrap(b)
    topic = unique_topic("txn-restart")
    create_topic(bs, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id("restart"),
                  "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=f"kept-{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    b.kill()
    b.restart(clean=False)
    lso = list_offsets(bs, topic, READ_COMMITTED)
    hw = list_offsets(bs, topic, READ_UNCOMMITTED)
    assert hw == {q: 10 for q in range(PARTITIONS)}, hw
    assert lso == {q: 0 for q in range(PARTITIONS)}, f"LSO after the restart: {lso}"
    p.commit_transaction(60)
    got = read_confluent(bs, topic, 30, READ_COMMITTED)
    assert sorted(r.value for r in got) == sorted(  # type: ignore[type-var]
        f"kept-{i}".encode() for i in range(30))
    assert list_offsets(bs, topic, READ_COMMITTED) == {q: 11 for q in range(PARTITIONS)}


# -- consume-transform-produce ---------------------------------------------------------------------
N_INPUT = 300
BATCH = 40


def fill_input(bs: str, prefix: str) -> tuple[str, str, list[bytes]]:
    src, dst = unique_topic(f"{prefix}-in"), unique_topic(f"{prefix}-out")
    create_topic(bs, src, PARTITIONS)
    create_topic(bs, dst, PARTITIONS)
    values = [f"{prefix}-v{i}".encode() for i in range(N_INPUT)]
    produce_confluent(bs, src, [Out(f"k{i}".encode(), v) for i, v in enumerate(values)])
    return src, dst, values


def transform(value: bytes) -> bytes:
    return value.upper() + b"!"


def check_pipeline_output(bs: str, src: str, dst: str, values: list[bytes], group: str,
                          aborted: int) -> None:
    want = sorted(transform(v) for v in values)
    got = read_confluent(bs, dst, len(want), READ_COMMITTED)
    counts = Counter(r.value for r in got)
    assert sorted(counts) == want, (
        f"read_committed output: {len(counts)} distinct of {len(want)}, "
        f"missing {len(set(want) - set(counts))}, extra {len(set(counts) - set(want))}")
    assert max(counts.values()) == 1, f"duplicates: {[v for v, n in counts.items() if n > 1][:5]}"
    everything = read_confluent(bs, dst, len(want) + aborted, READ_UNCOMMITTED)
    assert len(everything) == len(want) + aborted, (
        f"read_uncommitted sees {len(everything)}: the {aborted} aborted records are missing")
    ends = list_offsets(bs, src, READ_UNCOMMITTED)
    assert committed_offsets(bs, src, group) == ends, "the group's offsets are not the end"


def committed_offsets(bs: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def test_confluent_consume_transform_produce(txn_broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs = bootstrap(txn_broker)
    src, dst, values = fill_input(bs, "ctp-cf")
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": READ_COMMITTED})
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id("ctp-cf")})
    aborted = 0
    try:
        p.init_transactions(30)
        c.subscribe([src])
        done = 0
        first = True
        deadline = time.monotonic() + 60
        while done < N_INPUT and time.monotonic() < deadline:
            msgs = c.consume(BATCH, 1.0)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, key=m.key(), value=transform(m.value()))
            positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
            p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
            if first:  # the first batch is aborted: output invisible, offsets not committed
                first = False
                p.flush(30)
                p.abort_transaction(30)
                aborted = len(msgs)
                assert all(o < 0 for o in committed_offsets(bs, src, group).values())
                # Rewind to the committed offsets (none: the beginning), as Kafka's docs do.
                for tp in c.assignment():
                    c.seek(TopicPartition(tp.topic, tp.partition, 0))
                continue
            p.commit_transaction(30)
            done += len(msgs)
    finally:
        c.close()
    assert done == N_INPUT, f"consumed {done} of {N_INPUT}"
    check_pipeline_output(bs, src, dst, values, group, aborted)


def test_kafka_python_consume_transform_produce(txn_broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata

    bs = bootstrap(txn_broker)
    src, dst, values = fill_input(bs, "ctp-kp")
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    c = KafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level=READ_COMMITTED)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id("ctp-kp"))
    aborted = 0
    done = 0
    try:
        p.init_transactions()
        first = True
        deadline = time.monotonic() + 60
        while done < N_INPUT and time.monotonic() < deadline:
            batch = c.poll(1000, max_records=BATCH)
            msgs = [m for ms in batch.values() for m in ms]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.send(dst, key=m.key, value=transform(m.value))
            offsets = {tp: OffsetAndMetadata(c.position(tp), "", -1) for tp in c.assignment()}
            p.send_offsets_to_transaction(offsets, c.group_metadata())
            if first:
                first = False
                p.flush(30)
                p.abort_transaction()
                aborted = len(msgs)
                assert all(o < 0 for o in committed_offsets(bs, src, group).values())
                for tp in c.assignment():
                    c.seek(tp, 0)
                continue
            p.commit_transaction()
            done += len(msgs)
    finally:
        c.close()
        p.close(5)
    assert done == N_INPUT, f"consumed {done} of {N_INPUT}"
    check_pipeline_output(bs, src, dst, values, group, aborted)


def test_aiokafka_consume_transform_produce(txn_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    bs = bootstrap(txn_broker)
    src, dst, values = fill_input(bs, "ctp-aio")
    group = f"ctp-{uuid.uuid4().hex[:8]}"

    async def run() -> tuple[int, int]:
        c = AIOKafkaConsumer(src, bootstrap_servers=bs, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level=READ_COMMITTED)
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id("ctp-aio"))
        await c.start()
        await p.start()
        aborted = done = 0
        try:
            first = True
            deadline = time.monotonic() + 60
            while done < N_INPUT and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000, max_records=BATCH)
                msgs = [m for ms in batch.values() for m in ms]
                if not msgs:
                    continue
                await p.begin_transaction()
                futs = [await p.send(dst, key=m.key, value=transform(m.value)) for m in msgs]
                offsets = {tp: await c.position(tp) for tp in c.assignment()}
                await p.send_offsets_to_transaction(offsets, group)
                if first:
                    first = False
                    await asyncio.gather(*futs)
                    await p.abort_transaction()
                    aborted = len(msgs)
                    for tp in c.assignment():
                        c.seek(tp, 0)
                    continue
                await p.commit_transaction()
                done += len(msgs)
        finally:
            await c.stop()
            await p.stop()
        return done, aborted

    done, aborted = asyncio.run(run())
    assert done == N_INPUT, f"consumed {done} of {N_INPUT}"
    check_pipeline_output(bs, src, dst, values, group, aborted)


# -- fencing ---------------------------------------------------------------------------------------
def open_then_fence(bs: str, topic: str, tid: str, first: Any, flush_first: Callable[[], None],
                    first_commit: Callable[[], None]) -> BaseException:
    """`first` has produced 'a-open' records in an open transaction; a confluent-kafka producer
    with the same transactional.id initialises (aborting that transaction, bumping the epoch)
    and commits 'b-*'; then `first_commit()` must fail. Returns its exception."""
    flush_first()
    fence_with_second(bs, topic, tid)
    with pytest.raises(Exception) as info:
        first_commit()
    return info.value


def fence_with_second(bs: str, topic: str, tid: str) -> None:
    """A confluent-kafka producer with the same transactional.id: init_transactions (which
    aborts the first producer's open transaction and bumps the epoch), then commits 'b-*'."""
    from confluent_kafka import Producer

    second = Producer({"bootstrap.servers": bs, "transactional.id": tid})
    second.init_transactions(30)
    second.begin_transaction()
    for i in range(10):
        second.produce(topic, value=f"b-{i}".encode(), partition=i % PARTITIONS)
    second.commit_transaction(30)


def check_fenced_outcome(bs: str, topic: str) -> None:
    got = read_confluent(bs, topic, 10, READ_COMMITTED)
    assert sorted(r.value for r in got) == sorted(  # type: ignore[type-var]
        f"b-{i}".encode() for i in range(10)), "the fenced producer's records are visible"
    everything = read_confluent(bs, topic, 20, READ_UNCOMMITTED)
    assert sum(1 for r in everything if r.value.startswith(b"a-open")) == 10  # type: ignore


def test_confluent_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException, Producer

    bs = bootstrap(txn_broker)
    topic = unique_topic("fence-cf")
    create_topic(bs, topic, PARTITIONS)
    tid = txn_id("fence-cf")
    errors: list[Any] = []
    first = Producer({"bootstrap.servers": bs, "transactional.id": tid,
                      "error_cb": errors.append})
    first.init_transactions(30)
    first.begin_transaction()
    for i in range(10):
        first.produce(topic, value=f"a-open-{i}".encode(), partition=i % PARTITIONS)
    exc = open_then_fence(bs, topic, tid, first, lambda: first.flush(30),
                          lambda: first.commit_transaction(30))
    assert isinstance(exc, KafkaException), repr(exc)
    err = exc.args[0]
    assert err.fatal(), f"not fatal: {err}"
    assert err.name() in FENCED_NAMES, f"not a fenced error: {err}"
    with pytest.raises(KafkaException):  # fatal: every later operation fails too
        first.begin_transaction()
    check_fenced_outcome(bs, topic)


def test_kafka_python_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    bs = bootstrap(txn_broker)
    topic = unique_topic("fence-kp")
    create_topic(bs, topic, PARTITIONS)
    tid = txn_id("fence-kp")
    first = KafkaProducer(bootstrap_servers=bs, transactional_id=tid)
    try:
        first.init_transactions()
        first.begin_transaction()
        for i in range(10):
            first.send(topic, value=f"a-open-{i}".encode(), partition=i % PARTITIONS)
        exc = open_then_fence(bs, topic, tid, first, lambda: first.flush(30),
                              first.commit_transaction)
        assert isinstance(exc, ProducerFencedError | InvalidProducerEpochError), repr(exc)
        with pytest.raises(Exception):  # noqa: B017  fatal: the producer stays unusable
            first.begin_transaction()
            first.send(topic, value=b"after-fence", partition=0).get(10)
            first.commit_transaction()
    finally:
        first.close(5)
    check_fenced_outcome(bs, topic)


def test_aiokafka_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    bs = bootstrap(txn_broker)
    topic = unique_topic("fence-aio")
    create_topic(bs, topic, PARTITIONS)
    tid = txn_id("fence-aio")

    async def run() -> BaseException:
        first = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=tid)
        await first.start()
        try:
            await first.begin_transaction()
            futs = [await first.send(topic, value=f"a-open-{i}".encode(),
                                     partition=i % PARTITIONS) for i in range(10)]
            await asyncio.gather(*futs)
            # The second producer (blocking confluent-kafka calls) on another thread.
            await asyncio.to_thread(fence_with_second, bs, topic, tid)
            with pytest.raises(Exception) as info:
                await first.commit_transaction()
            return info.value
        finally:
            with contextlib.suppress(Exception):  # stopping a fenced producer is not the test
                await first.stop()

    exc = asyncio.run(run())
    assert isinstance(exc, ProducerFenced), repr(exc)
    check_fenced_outcome(bs, topic)


def test_kafka_python_admin_transaction_apis(txn_broker: BrokerProcess) -> None:
    """kafka-python's KafkaAdminClient (KIP-664) against odradek: list_transactions,
    describe_transactions and describe_producers see an open transaction of confluent-kafka;
    a transaction left open with no coordinator state (a transactional batch of a producer id
    no coordinator knows) is found by `odradek transactions find-hanging` (kafka-python's
    find_hanging_transactions only flags coordinator transactions older than the timeout plus
    5 minutes, and none is), and kafka-python's abort_transaction ends it: the LSO reaches
    the HW."""
    from confluent_kafka import Producer
    from kafka import TopicPartition as KTP
    from kafka.admin import AbortTransactionSpec, KafkaAdminClient

    bs = bootstrap(txn_broker)
    topic = unique_topic("txn-admin")
    create_topic(bs, topic, PARTITIONS)
    tid = txn_id("admin")
    p = Producer({"bootstrap.servers": bs, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(PARTITIONS):
        p.produce(topic, value=f"a-{i}".encode(), partition=i)
    assert p.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        listed = [t for ts in admin.list_transactions().values() for t in ts
                  if t.transactional_id == tid]
        assert len(listed) == 1 and listed[0].state.value == "Ongoing", listed
        desc = admin.describe_transactions([tid])[tid]
        assert desc.state.value == "Ongoing"
        assert {(tp.topic, tp.partition) for tp in desc.topic_partitions} == {
            (topic, i) for i in range(PARTITIONS)}
        producers = admin.describe_producers([KTP(topic, 0)])[KTP(topic, 0)].active_producers
        assert [s.producer_id for s in producers] == [desc.producer_id]
        assert producers[0].current_transaction_start_offset == 0
        p.commit_transaction(30)
        # A hanging transaction: the coordinator never heard of it (its partition was written
        # with an expired producer's transactional batch), so only an abort ends it.
        assert admin.find_hanging_transactions() == []
        assert find_hanging(bs, topic) == []
        hang = hanging_transaction(bs, topic)
        assert find_hanging(bs, topic) == [(topic, "1", str(hang))]
        assert list_offsets(bs, topic, READ_COMMITTED)[1] < list_offsets(
            bs, topic, READ_UNCOMMITTED)[1]
        admin.abort_transaction(AbortTransactionSpec(KTP(topic, 1), hang, 0, 0))
        assert wait_for(lambda: list_offsets(bs, topic, READ_COMMITTED)
                        == list_offsets(bs, topic, READ_UNCOMMITTED), 15)
        assert find_hanging(bs, topic) == []
    finally:
        admin.close()


def hanging_transaction(bs: str, topic: str, partition: int = 1,
                        producer_id: int = 888_888) -> int:
    """Write one transactional batch of a producer id no coordinator knows to `partition`:
    what a producer whose coordinator lost its state leaves open. Returns the producer id."""
    import dataclasses

    from odradek.protocol.records import build_batch
    from tests.integration.broker_harness import produce
    from tests.wire import WireClient

    host, port = bs.split(",")[0].rsplit(":", 1)

    async def write() -> Any:
        c = await WireClient.connect(host, int(port))
        try:
            batch = build_batch([(None, b"hanging")], producer_id=producer_id, producer_epoch=0,
                                base_sequence=0, is_transactional=True)
            req = dataclasses.replace(produce(topic, partition, batch),
                                      transactional_id="hanging-id")
            return await c.request(req)
        finally:
            await c.close()

    resp = asyncio.run(write())
    assert resp.responses[0].partition_responses[0].error_code == 0, resp
    return producer_id


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def find_hanging(bs: str, topic: str) -> list[tuple[str, str, str]]:
    """`odradek transactions find-hanging --topic T --max-transaction-timeout 0`: (topic,
    partition, producer id) of each row."""
    out = subprocess.run(["odradek", "transactions", "--bootstrap-server", bs, "find-hanging",
                          "--topic", topic, "--max-transaction-timeout", "0"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return [(r[0], r[1], r[2]) for r in rows]
