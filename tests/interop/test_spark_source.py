"""The `odradek` Spark data source, reading (S-9.1), against a real 3-broker odradek cluster and
the session's local SparkSession (tests/spark_fixture.py): batch reads equal what was produced
(per partition and offset, keys, headers, timestamps), offset ranges, minPartitions, option
errors, Structured Streaming over a checkpoint across two runs (every record exactly once, new
partitions picked up), maxOffsetsPerTrigger splitting an availableNow run into several
micro-batches, failOnDataLoss both ways after retention, a leader failover mid-read, a topic
deleted after planning (data loss, never re-created), and the executors' reader closing its
connections and event loop after every task (no leak across micro-batches)."""

from __future__ import annotations

import gc
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import Admin, Consumer, TopicPartition
from odradek.cluster import Cluster
from odradek.spark.offsets import DataLossError, OffsetRange, split_ranges
from odradek.spark.reader import read_ranges
from tests.interop.spark_helpers import (
    bootstrap,
    create_topic,
    expected_rows,
    produce,
    rows_of,
    start_cluster,
    topic_name,
    wait_until,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = start_cluster(3, **{"log.retention.check.interval.ms": 200,
                            "log.segment.delete.delay.ms": 0})
    try:
        yield c
    finally:
        c.stop()


def reader(spark: Any, c: Cluster, **options: str) -> Any:
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap(c))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_equals_what_was_produced(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-read")
    create_topic(bs, topic, 3)
    produced = produce(bs, topic, 3, 600)
    df = reader(spark, cluster, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    assert rows_of(df, headers=True) == expected_rows(produced, headers=True)
    # Without includeHeaders: Spark's 7 columns.
    plain = reader(spark, cluster, subscribePattern=topic.replace("read", "r.ad"))
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    assert rows_of(plain) == expected_rows(produced)


def test_offset_ranges_and_min_partitions(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-ranges")
    create_topic(bs, topic, 3)
    produced = produce(bs, topic, 3, 300, with_headers=False)  # 100 per partition
    df = reader(spark, cluster, subscribe=topic,
                startingOffsets=f'{{"{topic}":{{"0":5,"1":-2,"2":90}}}}',
                endingOffsets=f'{{"{topic}":{{"0":20,"1":-1,"2":95}}}}')
    want = [r for r in produced if (r.partition == 0 and 5 <= r.offset < 20)
            or r.partition == 1 or (r.partition == 2 and 90 <= r.offset < 95)]
    assert rows_of(df) == expected_rows(want)

    # startingTimestamp: per partition, from the first record at or after it.
    at = produced[150].timestamp_ms
    since = reader(spark, cluster, subscribe=topic, startingTimestamp=str(at))
    assert rows_of(since) == expected_rows([r for r in produced if r.timestamp_ms >= at])

    # startingOffsetsByTimestamp / endingOffsetsByTimestamp: a timestamp per partition
    # (Spark's option names; before this was supported the options were silently ignored).
    ts = {p: [r.timestamp_ms for r in produced if r.partition == p] for p in range(3)}
    starts, ends = {0: ts[0][10], 1: ts[1][0], 2: ts[2][40]}, {0: ts[0][30], 1: ts[1][5],
                                                               2: ts[2][99] + 10_000}
    by_ts = reader(spark, cluster, subscribe=topic,
                   startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{starts[0]},"1":'
                                              f'{starts[1]},"2":{starts[2]}}}}}',
                   endingOffsetsByTimestamp=f'{{"{topic}":{{"0":{ends[0]},"1":{ends[1]},'
                                            f'"2":{ends[2]}}}}}')
    assert rows_of(by_ts) == expected_rows(
        [r for r in produced if starts[r.partition] <= r.timestamp_ms < ends[r.partition]])

    # assign + minPartitions: the planner's split, and every record once.
    assign = reader(spark, cluster, assign=f'{{"{topic}":[0,2]}}', minPartitions="7")
    plan = split_ranges([OffsetRange(topic, 0, 0, 100), OffsetRange(topic, 2, 0, 100)], 7)
    assert len(plan) >= 6
    assert assign.rdd.getNumPartitions() == len(plan)
    assert rows_of(assign) == expected_rows([r for r in produced if r.partition != 1])


def test_bad_options_fail_with_sparks_message(spark: Any, cluster: Cluster) -> None:
    with pytest.raises(Exception, match="Only one of the following options can be specified"):
        reader(spark, cluster, subscribe="a", assign='{"a":[0]}').collect()
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        reader(spark, cluster, subscribe="a", startingOffsets="latest").collect()
    # A partition that does not exist is named (it used to be a ListOffsets timeout).
    bs = bootstrap(cluster)
    topic = topic_name("spark-assign")
    create_topic(bs, topic, 1)
    with pytest.raises(Exception, match=rf"Topic partitions \[{topic}-3\] of option 'assign' "
                                        "do not exist"):
        reader(spark, cluster, assign=f'{{"{topic}":[0,3]}}').collect()
    # No broker at kafka.bootstrap.servers: one clear error naming it.
    no_broker = (spark.read.format("odradek").option("kafka.bootstrap.servers", "127.0.0.1:1")
                 .option("subscribe", topic).load())
    with pytest.raises(Exception, match=re.escape(
            "Cannot get partitions and offsets from the cluster at "
            "kafka.bootstrap.servers=127.0.0.1:1")):
        no_broker.collect()


def test_reading_a_deleted_topic_is_data_loss_and_does_not_create_it(cluster: Cluster) -> None:
    """A task whose topic was deleted after planning: its metadata requests must not
    auto-create the topic again (the brokers here have auto.create.topics.enable=true, Kafka's
    default), and the missing records are data loss (an error naming the partition with
    failOnDataLoss, else the range is skipped), not a retry loop until pollTimeoutMs."""
    bs = bootstrap(cluster)
    gone = topic_name("spark-gone")
    ranges = [OffsetRange(gone, 0, 0, 10)]
    kafka = {"bootstrap.servers": bs}
    with pytest.raises(DataLossError, match=rf"Cannot fetch offsets \[0, 10\) of {gone}-0: "
                                            "the cluster does not have this partition"):
        list(read_ranges(ranges, kafka, fail_on_data_loss=True, include_headers=False,
                         poll_timeout_ms=1000))
    assert list(read_ranges(ranges, kafka, fail_on_data_loss=False, include_headers=False,
                            poll_timeout_ms=1000)) == []
    with Consumer({"bootstrap.servers": bs}) as c:
        assert gone not in c.list_topics()


def test_reader_closes_its_connections_and_event_loop(cluster: Cluster) -> None:
    """What a Python worker runs per Spark task (S-9.1): 40 tasks, half of them abandoned
    after the first batch (a `limit`), leave no socket, loop or thread behind (the worker
    is reused across micro-batches, so a leak would grow with every batch)."""
    bs = bootstrap(cluster)
    topic = topic_name("spark-fds")
    create_topic(bs, topic, 1)
    produce(bs, topic, 1, 200, with_headers=False)
    kafka = {"bootstrap.servers": bs, "max.partition.fetch.bytes": "1024"}

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def task(i: int) -> int:
        batches = read_ranges([OffsetRange(topic, 0, 0, 200)], kafka,
                              fail_on_data_loss=True, include_headers=False)
        if i % 2:
            n = next(batches).num_rows
            batches.close()  # what Spark does to an iterator it stops reading
            return n
        return sum(b.num_rows for b in batches)

    task(0)  # imports and lazily created module state are not leaks
    gc.collect()
    gc.disable()  # only explicit closing counts: the garbage collector would hide a leak
    try:
        fds, threads = open_fds(), threading.active_count()
        counts = [task(i) for i in range(40)]
        assert counts[0::2] == [200] * 20 and all(0 < n <= 200 for n in counts[1::2])
        # The brokers run in this process too: give them time to close their ends. Their own
        # descriptors and threads come and go (segment handles, checkpoint and cleaner
        # threads), so the check is that nothing grew: with close() removed, 286 fds against 34.
        wait_until(lambda: open_fds() <= fds, 30, f"open fds to be back to at most {fds}")
        wait_until(lambda: threading.active_count() <= threads, 30,
                   f"threads to be back to at most {threads}")
    finally:
        gc.enable()


def _stream(spark: Any, c: Cluster, topic_pattern: str, out: Path, checkpoint: Path,
            **options: str) -> Any:
    r = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap(c))
         .option("subscribePattern", topic_pattern).option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("topic", "partition", "offset", "value").writeStream
         .format("parquet").option("path", str(out))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive, "the availableNow query did not finish"
    assert q.exception() is None, q.exception()
    return q


def test_streaming_with_checkpoint_reads_every_record_once(spark: Any, cluster: Cluster,
                                                           tmp_path: Path) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-stream")
    create_topic(bs, topic, 2)
    first = produce(bs, topic, 2, 120, with_headers=False)
    out, ck = tmp_path / "out", tmp_path / "checkpoint"
    pattern = f"{topic}(-later)?"
    _stream(spark, cluster, pattern, out, ck)
    assert spark.read.parquet(str(out)).count() == 120
    # More records, and a third partition, between the runs.
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_partitions({topic: 3})
        admin.wait_for_topics([topic], timeout=30)
    with Consumer({"bootstrap.servers": bs}) as c:
        wait_until(lambda: len(c.list_topics().get(topic, [])) == 3, 30, "the third partition")
    second = produce(bs, topic, 3, 90, start=1000, with_headers=False)
    # A topic matching subscribePattern, created between the runs, is read from its start.
    create_topic(bs, f"{topic}-later", 1)
    later = produce(bs, f"{topic}-later", 1, 15, with_headers=False)
    _stream(spark, cluster, pattern, out, ck)
    got = sorted((r.topic, r.partition, r.offset, bytes(r.value))
                 for r in spark.read.parquet(str(out)).collect())
    want = sorted((r.topic, r.partition, r.offset, r.value) for r in first + second + later)
    assert got == want  # nothing lost, nothing read twice
    assert any(p == 2 for _, p, _, _ in got)


def test_max_offsets_per_trigger_gives_several_micro_batches(spark: Any, cluster: Cluster,
                                                             tmp_path: Path) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-rate")
    create_topic(bs, topic, 3)
    produced = produce(bs, topic, 3, 300, with_headers=False)
    q = _stream(spark, cluster, topic, tmp_path / "out", tmp_path / "ck",
                maxOffsetsPerTrigger="70")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] > 0]
    assert sum(sizes) == 300
    assert len(sizes) >= 5  # ceil(300 / 70)
    assert max(sizes) <= 70 + 3  # proration rounds up only for tiny backlogs
    got = sorted((r.partition, r.offset) for r in spark.read.parquet(
        str(tmp_path / "out")).collect())
    assert got == sorted((r.partition, r.offset) for r in produced)


def test_fail_on_data_loss_after_retention(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-loss")
    create_topic(bs, topic, 1, config={"segment.bytes": "2000", "retention.bytes": "6000"})
    produced = produce(bs, topic, 1, 400, with_headers=False, extra={"batch.size": 1000})
    with Consumer({"bootstrap.servers": bs}) as c:
        tp = TopicPartition(topic, 0)
        wait_until(lambda: c.beginning_offsets([tp])[tp] > 0, 60, "retention to delete")
        time.sleep(0.5)  # retention has stopped: what is left is under retention.bytes
        log_start = c.beginning_offsets([tp])[tp]
    opts = {"subscribe": topic, "startingOffsets": f'{{"{topic}":{{"0":0}}}}'}
    with pytest.raises(Exception, match="failOnDataLoss") as err:
        reader(spark, cluster, **opts).collect()
    assert f"earliest available offset is {log_start}" in str(err.value)
    rows = rows_of(reader(spark, cluster, failOnDataLoss="false", **opts))
    assert rows == expected_rows([r for r in produced if r.offset >= rows[0][2]])
    assert rows[0][2] >= log_start and rows[-1][2] == 399


def test_leader_failover_during_read_loses_nothing(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-failover")
    create_topic(bs, topic, 2, replication=3)
    produced = produce(bs, topic, 2, 6000, with_headers=False)
    assert cluster.inner is not None
    with Admin({"bootstrap.servers": bs}) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[0].leader
    killed: list[float] = []

    def kill_when_reading() -> None:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 60
        while not tracker.getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.01)
        cluster.run(cluster.inner.kill_broker(leader))  # type: ignore[union-attr]
        killed.append(time.monotonic())

    killer = threading.Thread(target=kill_when_reading, daemon=True)
    df = reader(spark, cluster, subscribe=topic,
                **{"kafka.max.partition.fetch.bytes": "1024", "kafka.fetch.max.wait.ms": "50"})
    try:
        killer.start()
        rows = rows_of(df)
        killer.join(60)
        assert killed, "the leader was never killed"
        assert rows == expected_rows(produced)
    finally:
        killer.join(60)
        cluster.run(cluster.inner.restart_broker(leader, clean=False))


def test_read_committed_reads_committed_transactions_only(spark: Any, cluster: Cluster) -> None:
    """kafka.isolation.level=read_committed, as Spark's Kafka source: a committed transaction's
    records are read, an aborted one's are not, and an open transaction (and what follows it)
    stays beyond the last stable offset; read_uncommitted sees all of it."""
    import confluent_kafka

    bs = bootstrap(cluster)
    topic = topic_name("spark-rc")
    create_topic(bs, topic, 2)

    def txn_producer(tid: str) -> Any:
        p = confluent_kafka.Producer({"bootstrap.servers": bs, "transactional.id": tid,
                                      "linger.ms": 5})
        p.init_transactions(30)
        return p

    p = txn_producer(f"{topic}-a")
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(40):
            p.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % 2)
        p.flush(30)  # librdkafka drops what is still queued when a transaction aborts
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(30)
    hanging = txn_producer(f"{topic}-b")
    hanging.begin_transaction()
    for i in range(10):
        hanging.produce(topic, value=f"open-{i}".encode(), partition=i % 2)
    hanging.flush(30)
    p.begin_transaction()  # committed, but after the open transaction's first offset
    p.produce(topic, value=b"after-open", partition=0)
    p.commit_transaction(30)

    def values(**options: str) -> list[str]:
        df = reader(spark, cluster, subscribe=topic, **options)
        return sorted(r.value.decode() for r in df.select("value").collect())

    committed = values(**{"kafka.isolation.level": "read_committed"})
    assert committed == sorted([f"commit-{i}" for i in range(40)] * 2)
    everything = values()
    assert sum(v.startswith("commit-") for v in everything) == 80
    assert sum(v.startswith("abort-") for v in everything) == 40
    assert sum(v.startswith("open-") for v in everything) == 10
    assert "after-open" in everything
    hanging.abort_transaction(30)
    wait_until(lambda: values(**{"kafka.isolation.level": "read_committed"}).count(
        "after-open") == 1, 30, "the LSO to pass the aborted transaction")
    assert not any(v.startswith(("abort-", "open-"))
                   for v in values(**{"kafka.isolation.level": "read_committed"}))
