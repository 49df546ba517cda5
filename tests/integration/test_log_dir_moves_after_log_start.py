"""Log-dir moves (KIP-113) of replicas whose log start offset lies inside a batch, with real
clients: confluent-kafka produces (several records a batch), deletes records (DeleteRecords),
runs transactions and reads (read_uncommitted and read_committed); `odradek
reassign-partitions` moves broker 0's replicas to its other log dir (AlterReplicaLogDirs) and
verifies, `odradek log-dirs --describe` shows the future replicas and their lag (DescribeLogDirs)
mid-move. A 2-broker cluster, two log dirs a broker.

Each move must complete: no ``-future`` dir left, the moved log's content from its log start
offset on equal to the other replica's (which never moved), and what consumers read the same
before and after. Covered: the log start offset inside a batch of the first segment and of a
later one (DeleteRecords, segments below it removed), after retention by time and by size,
during compaction (compact,delete, the cleaner running), and with open transactions (the last
stable offset, what read_committed reads, the aborted transactions and the producers of the
moved log, before and after the transactions end)."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from odradek import cli
from odradek.cluster import Cluster
from odradek.storage.log import Log

pytestmark = pytest.mark.timeout(240)

T = TypeVar("T")
THROTTLE = "40000"  # B/s: a move of ~100 KB takes a few seconds, long enough to be seen
OVERRIDES = {
    "replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "100",
    "replica.fetch.max.bytes": "8192",  # the mover's chunk
    "replication.quota.window.num": "2",
    "log.retention.check.interval.ms": "300", "log.cleaner.backoff.ms": "200",
    "log.flush.offset.checkpoint.interval.ms": "500",
    "offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}


DIRS: dict[int, list[Path]] = {}  # each broker's log dirs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("moves")
    DIRS.update({b: [root / f"b{b}-x", root / f"b{b}-y"] for b in (0, 1)})
    with Cluster(2, data_dir=root / "cluster", http=False, overrides=OVERRIDES,
                 broker_overrides={b: {"log.dirs": ",".join(map(str, d))}
                                   for b, d in DIRS.items()}) as c:
        yield c


# -- helpers ------------------------------------------------------------------------------------

def on_loop(cluster: Cluster, fn: Callable[[], T]) -> T:
    """`fn()` on the cluster's loop, which owns the logs."""
    async def call() -> T:
        return fn()
    return cluster.run(call())


def log_of(cluster: Cluster, broker: int, topic: str, partition: int) -> Log:
    lm = cluster.brokers[broker].log_manager
    assert lm is not None
    found = lm.get_log(topic, partition)
    assert found is not None
    return found


def from_log_start(cluster: Cluster, broker: int, topic: str, partition: int
                   ) -> tuple[int, int, bytes]:
    """The log start and end offsets of a replica and its bytes from the batch holding the log
    start offset on."""
    def read() -> tuple[int, int, bytes]:
        lg = log_of(cluster, broker, topic, partition)
        data = lg.read(lg.log_start_offset, 1 << 30).read_bytes()
        return lg.log_start_offset, lg.log_end_offset, bytes(data)
    return on_loop(cluster, read)


def batch_inside(cluster: Cluster, topic: str, partition: int, segment: int,
                 at_least: int = 0) -> int:
    """An offset inside (not at the base of) a batch of broker 0's `segment`-th segment, the
    batch's base offset at least `at_least`."""
    def find() -> int:
        lg = log_of(cluster, 0, topic, partition)
        seg = lg.segments[segment]
        for h in seg.iter_headers(0):
            if h.last_offset - h.base_offset >= 2 and h.base_offset >= at_least:
                return h.base_offset + 1
        raise AssertionError(f"no batch of 3 records in segment {seg.base_offset}")
    return on_loop(cluster, find)


def inside_a_batch(cluster: Cluster, broker: int, topic: str, partition: int) -> bool:
    def check() -> bool:
        lg = log_of(cluster, broker, topic, partition)
        start = lg.log_start_offset
        return any(h.base_offset < start <= h.last_offset for h in lg.iter_batch_headers(start))
    return on_loop(cluster, check)


def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def create_topic(cluster: Cluster, assignment: dict[int, list[int]],
                 config: dict[str, str]) -> str:
    topic = f"mv-{uuid.uuid4().hex[:8]}"
    client = admin(cluster)  # alive until the futures are done
    futures = client.create_topics([NewTopic(
        topic, len(assignment), replica_assignment=[assignment[p] for p in sorted(assignment)],
        config=config)])
    futures[topic].result(30)
    cluster.wait_for(lambda: all(
        (topic, p) in b.replica_manager.partitions  # type: ignore[union-attr]
        for b in cluster.brokers.values() for p in assignment), what=f"{topic} hosted")
    return topic


def producer(cluster: Cluster, **conf: Any) -> Producer:
    """Batches of up to 10 records (~2 KB, well under the topics' segment.bytes)."""
    return Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                     "linger.ms": 20, "batch.num.messages": 10, **conf})


def produce(cluster: Cluster, topic: str, partition: int, count: int, *, keys: int = 0,
            size: int = 150, timestamp: int = 0, tag: str = "v") -> None:
    """`count` records, several a batch (linger.ms), acknowledged by both replicas."""
    p = producer(cluster)
    errors: list[Any] = []
    for i in range(count):
        kwargs: dict[str, Any] = {"timestamp": timestamp} if timestamp else {}
        p.produce(topic, (f"{tag}{i}-".encode() + b"x" * size), partition=partition,
                  key=f"k{i % keys}".encode() if keys else None,
                  on_delivery=lambda e, _m: errors.append(e) if e else None, **kwargs)
        if i % 50 == 49:
            p.poll(0)
    assert p.flush(30) == 0
    assert errors == []


def delete_records(cluster: Cluster, topic: str, partition: int, offset: int) -> int:
    client = admin(cluster)
    futures = client.delete_records([CTP(topic, partition, offset)], operation_timeout=30,
                                    request_timeout=40)
    (future,) = futures.values()
    return int(future.result().low_watermark)


def read_all(cluster: Cluster, topic: str, partition: int, committed: bool = False
             ) -> list[tuple[int, bytes | None, bytes]]:
    """(offset, key, value) of every record a consumer reads from the log start offset up to
    the end of the partition (the high watermark; read_committed: the last stable offset)."""
    from confluent_kafka import KafkaError

    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    got: list[tuple[int, bytes | None, bytes]] = []
    try:
        c.assign([CTP(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, f"no end of partition after {len(got)} records"
            m = c.poll(0.2)
            if m is None:
                continue
            error = m.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                break
            assert error is None, error
            got.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


def latest(cluster: Cluster, topic: str, partition: int,
           level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> int:
    """ListOffsets latest: the high watermark, or the last stable offset (read_committed).
    Asked again after FENCED_LEADER_EPOCH: the reassignment that moves a replica's dir bumps
    the leader epoch, which a broker's metadata may not have yet (librdkafka's admin client
    does not retry it)."""
    from confluent_kafka import KafkaError, KafkaException

    tp = CTP(topic, partition)
    deadline = time.monotonic() + 10
    while True:
        client = admin(cluster)
        futures = client.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
        try:
            return int(next(iter(futures.values())).result().offset)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.FENCED_LEADER_EPOCH \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def tool(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def future_lags(cluster: Cluster, topic: str) -> dict[int, int]:
    """`odradek log-dirs --describe`: broker 0's future replicas of `topic` and their lag."""
    code, out = tool("log-dirs", "--describe", "--bootstrap-server", cluster.bootstrap_servers,
                     "--broker-list", "0", "--topic-list", topic)
    assert code == 0, out
    doc = json.loads(out.strip().splitlines()[-1])
    return {int(p["partition"].rsplit("-", 1)[1]): int(p["offsetLag"])
            for d in doc["brokers"][0]["logDirs"] for p in d["partitions"] if p["isFuture"]}


class Move:
    """Broker 0's replicas of `partitions` of `topic` to its other log dir, throttled, with
    `odradek reassign-partitions`."""

    def __init__(self, cluster: Cluster, tmp_path: Path, topic: str,
                 assignment: dict[int, list[int]]) -> None:
        self.cluster, self.topic, self.assignment = cluster, topic, assignment
        dirs = DIRS[0]
        self.sources = {p: log_of(cluster, 0, topic, p).dir.parent for p in assignment}
        self.dests = {p: next(d.absolute() for d in dirs if d.absolute() != self.sources[p])
                      for p in assignment}
        self.plan = tmp_path / f"{topic}.json"
        self.plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": replicas,
             "log_dirs": [str(self.dests[p]) if b == 0 else "any" for b in replicas]}
            for p, replicas in assignment.items()]}))

    def start(self, throttle: str = THROTTLE) -> None:
        self.before = {p: from_log_start(self.cluster, 0, self.topic, p)
                       for p in self.assignment}
        code, out = tool("reassign-partitions", "--bootstrap-server",
                         self.cluster.bootstrap_servers, "--execute", "--reassignment-json-file",
                         str(self.plan), "--replica-alter-log-dirs-throttle", throttle)
        assert code == 0, out
        started = next(line for line in out.splitlines()
                       if line.startswith("Successfully started log directory move"))
        assert {f"{self.topic}-{p}-0" for p in self.assignment} \
            == set(started.split(": ", 1)[1].split(","))

    def wait(self, timeout_s: float = 40) -> None:
        """`--verify --wait` until done (the throttle is cleared then). A move that stopped
        stays visible: DescribeLogDirs lists the future replica with a lag that stays, which
        the failure shows."""
        lags = [future_lags(self.cluster, self.topic)]
        code, out = tool("reassign-partitions", "--bootstrap-server",
                         self.cluster.bootstrap_servers, "--verify", "--wait",
                         "--wait-interval-ms", "200", "--wait-timeout-ms",
                         str(int(timeout_s * 1000)), "--reassignment-json-file", str(self.plan))
        if code != 0:
            lags.append(future_lags(self.cluster, self.topic))
            raise AssertionError(f"the move did not complete; future replica lags (broker 0) "
                                 f"before and after {timeout_s} s: {lags}\n{out}")
        for p in self.assignment:
            assert f"Reassignment of replica {self.topic}-{p}-0 completed successfully." in out

    def check_done(self, other_replica: bool = True) -> None:
        """No future log or ``-future`` dir left; the logs in their new dirs; each moved log's
        content from its log start offset on what it was before the move (nothing was appended
        meanwhile) and, with `other_replica`, broker 1's replica's."""
        lm = self.cluster.brokers[0].log_manager
        assert lm is not None
        assert on_loop(self.cluster, lambda: lm.wait_for_deletions(10))
        assert on_loop(self.cluster, lm.future_logs) == {}
        for d in DIRS[0]:
            assert not [e.name for e in d.iterdir() if e.name.endswith("-future")]
        for p in self.assignment:
            assert log_of(self.cluster, 0, self.topic, p).dir.parent == self.dests[p]
            assert not (self.sources[p] / f"{self.topic}-{p}").exists()
            assert from_log_start(self.cluster, 0, self.topic, p) == self.before[p]
            if not other_replica:
                continue
            self.cluster.wait_for(
                lambda p=p: from_log_start(self.cluster, 0, self.topic, p)  # type: ignore[misc]
                == from_log_start(self.cluster, 1, self.topic, p), what="replicas equal")


# -- the tests ----------------------------------------------------------------------------------

def test_moves_after_delete_records(cluster: Cluster, tmp_path: Path) -> None:
    """Partition 0 (led by broker 0): DeleteRecords into a batch of its first segment.
    Partition 1 (broker 0 follows): into a batch of its third segment; retention removes the
    segments below it. Mid-move DescribeLogDirs shows both future replicas with their lag."""
    assignment = {0: [0, 1], 1: [1, 0]}
    topic = create_topic(cluster, assignment, {"segment.bytes": "16384"})
    for p in assignment:
        produce(cluster, topic, p, 500)  # ~85 KB, 5 segments
    starts = {0: batch_inside(cluster, topic, 0, 0), 1: batch_inside(cluster, topic, 1, 2)}
    for p, offset in starts.items():
        assert delete_records(cluster, topic, p, offset) == offset
    cluster.wait_for(lambda: all(log_of(cluster, b, topic, 1).segments[0].base_offset > 0
                                 for b in (0, 1)), what="segments below the log start removed")
    for p in assignment:
        assert inside_a_batch(cluster, 0, topic, p)
    before = {p: read_all(cluster, topic, p) for p in assignment}
    assert [r[0] for r in before[0]][:1] == [starts[0]]
    move = Move(cluster, tmp_path, topic, assignment)
    move.start()
    lags = future_lags(cluster, topic)
    assert set(lags) == {0, 1} and all(lag > 0 for lag in lags.values()), lags
    move.wait()
    move.check_done()
    for p in assignment:
        assert log_of(cluster, 0, topic, p).log_start_offset == starts[p]
        assert read_all(cluster, topic, p) == before[p]
    assert future_lags(cluster, topic) == {}
    produce(cluster, topic, 0, 10, tag="after")  # the moved leader log takes writes
    assert len(read_all(cluster, topic, 0)) == len(before[0]) + 10


@pytest.mark.parametrize("retention", ["time", "size"])
def test_move_after_retention(cluster: Cluster, tmp_path: Path, retention: str) -> None:
    """Retention by time (records ten minutes old, retention.ms one minute) or by size
    (retention.bytes) removes the first segments and moves the log start offset to a
    segment's base offset; DeleteRecords then moves it into a batch of the first segment
    left."""
    now = int(time.time() * 1000)
    config = {"segment.bytes": "16384"}
    config |= {"retention.ms": "60000"} if retention == "time" else {"retention.bytes": "50000"}
    assignment = {0: [0, 1]}
    topic = create_topic(cluster, assignment, config)
    old = 250 if retention == "time" else 0
    if old:
        produce(cluster, topic, 0, old, timestamp=now - 600_000, tag="old")
    produce(cluster, topic, 0, 500)
    lg = log_of(cluster, 0, topic, 0)

    def settled() -> bool:
        """Retention removed what it will: a pass now would remove nothing more."""
        first = lg.segments[0]
        if retention == "time":
            return first.largest_timestamp() > now - 60_000
        return lg.size - first.size < 50_000

    cluster.wait_for(lambda: on_loop(cluster, settled), timeout=30,
                     what=f"retention by {retention}")
    assert on_loop(cluster, lambda: 0 < lg.log_start_offset == lg.segments[0].base_offset)
    start = batch_inside(cluster, topic, 0, 0, at_least=old)  # not to go by retention.ms
    assert delete_records(cluster, topic, 0, start) == start
    assert inside_a_batch(cluster, 0, topic, 0)
    before = read_all(cluster, topic, 0)
    move = Move(cluster, tmp_path, topic, assignment)
    move.start()
    move.wait()
    move.check_done(other_replica=False)  # broker 1 applies retention to its own segments
    assert log_of(cluster, 0, topic, 0).log_start_offset == start
    assert read_all(cluster, topic, 0) == before


def test_move_during_compaction(cluster: Cluster, tmp_path: Path) -> None:
    """A compact,delete topic the cleaner works on: once cleaned up to its active segment,
    DeleteRecords into a batch, then the move while records keep coming (dirty data the cleaner
    must leave alone until the swap; a pass under way when a move starts is the unit test
    test_move_while_the_log_is_being_cleaned). Every record read before is read after unless a
    later record of its key came, the latest value of every key is the same, and the cleaner
    cleans the moved log."""
    assignment = {0: [0, 1]}
    topic = create_topic(cluster, assignment, {
        "cleanup.policy": "compact,delete", "segment.bytes": "16384",
        "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
    lm = cluster.brokers[0].log_manager
    assert lm is not None

    def checkpoint() -> int:
        return on_loop(cluster, lambda: lm.cleaner_manager.all_cleaner_checkpoints()
                       .get((topic, 0), 0))

    produce(cluster, topic, 0, 1000, keys=40, size=100)
    lg = log_of(cluster, 0, topic, 0)
    cluster.wait_for(lambda: checkpoint() == on_loop(cluster, lambda: lg.active_segment
                                                     .base_offset), timeout=30,
                     what="the log cleaned up to its active segment (the cleaner idle)")
    start = batch_inside(cluster, topic, 0, 0)
    assert delete_records(cluster, topic, 0, start) == start
    assert inside_a_batch(cluster, 0, topic, 0)
    before = read_all(cluster, topic, 0)
    cleaned_to = checkpoint()
    stop = threading.Event()
    during: list[int] = []

    def keep_producing() -> None:
        while not stop.is_set() and len(during) < 40:
            produce(cluster, topic, 0, 20, keys=40, size=100, tag=f"d{len(during)}-")
            during.append(1)

    writer = threading.Thread(target=keep_producing)
    move = Move(cluster, tmp_path, topic, assignment)
    move.start()
    writer.start()
    try:
        move.wait()
    finally:
        stop.set()
        writer.join(60)
    assert log_of(cluster, 0, topic, 0).dir.parent == move.dests[0]
    after = read_all(cluster, topic, 0)
    by_offset = {o: (k, v) for o, k, v in after}
    # what was read before is there still, unless a later record of its key replaced it
    last_of_key = {k: o for o, k, _ in after}
    for o, k, v in before:
        assert by_offset.get(o, (k, v)) == (k, v)
        assert o in by_offset or last_of_key[k] > o
    assert {k: v for _, k, v in before} | {k: v for o, k, v in after if o >= before[-1][0]} \
        == {k: v for _, k, v in after}
    assert after[0][0] >= start
    assert on_loop(cluster, lambda: lm.get_future_log(topic, 0)) is None
    assert not [e for d in DIRS[0] for e in d.iterdir() if e.name.endswith("-future")]
    cluster.wait_for(lambda: checkpoint() > cleaned_to, timeout=30,
                     what="the cleaner cleaning the moved log")


def test_move_with_open_transactions(cluster: Cluster, tmp_path: Path) -> None:
    """Transactions around a log start offset inside a batch: one open since before it
    (DeleteRecords may pass it), one aborted across it, one open above it. The moved log has
    the last stable offset, the aborted transactions and the producers of broker 1's replica
    (which never moved); read_committed reads the same before and after the move, and after
    the open transactions commit and abort."""
    assignment = {0: [0, 1]}
    topic = create_topic(cluster, assignment, {"segment.bytes": "1048576"})
    boot = cluster.bootstrap_servers

    def txn_producer(name: str) -> Producer:
        p = Producer({"bootstrap.servers": boot, "transactional.id": f"{topic}-{name}",
                      "linger.ms": 20, "batch.num.messages": 10})
        p.init_transactions(30)
        p.begin_transaction()
        return p

    def txn_send(p: Producer, count: int, tag: str) -> None:
        for i in range(count):
            p.produce(topic, f"{tag}{i}".encode(), partition=0)
        assert p.flush(30) == 0

    produce(cluster, topic, 0, 30, tag="a")
    first = txn_producer("first")  # open from here on, no record of it after the log start
    txn_send(first, 3, "first")
    aborted = txn_producer("aborted")
    txn_send(aborted, 3, "aborted")
    produce(cluster, topic, 0, 30, tag="b")
    start = on_loop(cluster, lambda: next(
        h.base_offset + 1 for h in log_of(cluster, 0, topic, 0).iter_batch_headers()
        if h.producer_id < 0 and h.base_offset > 36 and h.last_offset - h.base_offset >= 2))
    assert delete_records(cluster, topic, 0, start) == start
    aborted.abort_transaction(30)  # its marker above the log start offset
    produce(cluster, topic, 0, 30, tag="c")
    upper = txn_producer("upper")
    txn_send(upper, 5, "upper")
    produce(cluster, topic, 0, 30, tag="d")
    assert inside_a_batch(cluster, 0, topic, 0)

    def txn_state(broker: int) -> tuple[int, list[Any], dict[int, tuple[int, int]]]:
        def read() -> tuple[int, list[Any], dict[int, tuple[int, int]]]:
            lg = log_of(cluster, broker, topic, 0)
            producers = {pid: (e.producer_epoch, e.current_txn_first_offset)
                         for pid, e in lg.producer_state.producers.items()}
            return (lg.log_start_offset,
                    lg.collect_aborted_transactions(lg.log_start_offset, lg.log_end_offset),
                    producers)
        return on_loop(cluster, read)

    def read_committed() -> tuple[int, list[tuple[int, bytes | None, bytes]]]:
        return (latest(cluster, topic, 0, IsolationLevel.READ_COMMITTED),
                read_all(cluster, topic, 0, committed=True))

    lso, records = read_committed()
    assert lso == start and records == []  # "first" holds everything back from the start
    assert txn_state(0) == txn_state(1)
    move = Move(cluster, tmp_path, topic, assignment)
    move.start()
    move.wait()
    move.check_done()
    assert read_committed() == (lso, records)
    assert txn_state(0) == txn_state(1)
    first.commit_transaction(30)
    lso, records = read_committed()
    upper_first = min(o for o, _, v in read_all(cluster, topic, 0) if v.startswith(b"upper"))
    assert lso == upper_first and records and all(v[:1] in b"bc" for _, _, v in records)
    upper.abort_transaction(30)
    cluster.wait_for(lambda: latest(cluster, topic, 0, IsolationLevel.READ_COMMITTED)
                     == latest(cluster, topic, 0), what="no transaction open")
    lso, records = read_committed()
    assert {v[:1] for _, _, v in records} == {b"b", b"c", b"d"}  # never "aborted"/"upper"
    cluster.wait_for(lambda: txn_state(0) == txn_state(1), what="replicas' transactions equal")
    assert [t.producer_id for t in txn_state(0)[1]] != []
