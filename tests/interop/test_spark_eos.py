"""The `odradek` sink with deliveryGuarantee=exactly-once (a two-phase commit over KIP-98
transactions, spark/eos.py), on the shared local SparkSession: a batch write appears all at once
under read_committed and a failed one not at all; a streaming copy delivers every record once;
a micro-batch replayed after its Kafka transactions were committed (the driver died before
Spark's commit log recorded it: here its commit file is removed) is skipped, where the
at-least-once sink writes it twice; option errors are clear."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.chaos.checker.consistency import CheckReport, check_copy
from odradek.chaos.scenarios.spark import sink_guarantees
from odradek.cluster import Cluster
from tests.interop.spark_helpers import (
    bootstrap,
    create_topic,
    produce,
    read_output,
    read_values,
    start_cluster,
    topic_name,
)


def _check(sent: list[str], bs: str, topic: str, partitions: int,
           guarantee: str = "exactly-once") -> CheckReport:
    """The consistency checker: `sent` against `topic` read with read_committed."""
    return check_copy(sent, read_output(bs, topic, partitions), sink_guarantees(guarantee))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = start_cluster(1)
    try:
        yield c
    finally:
        c.stop()


def test_batch_write_commits_all_at_once_or_nothing(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("eos-batch")
    create_topic(bs, topic, 3)
    values = [f"v{i}" for i in range(300)]
    df = spark.createDataFrame([(v,) for v in values], "value string").repartition(3)
    (df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bs)
     .option("topic", topic).option("deliveryGuarantee", "exactly-once").save())
    check = _check(values, bs, topic, 3)
    assert check.ok and check.row("lost").checked == 300, check.to_text()

    # One task fails (partition 7 does not exist): the others' transactions are aborted.
    bad = spark.createDataFrame([(f"w{i}", 7 if i == 5 else i % 3) for i in range(90)],
                                "value string, partition int").repartition(3)
    with pytest.raises(Exception, match="Writing to odradek failed"):
        (bad.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bs)
         .option("topic", topic).option("deliveryGuarantee", "exactly-once")
         .option("kafka.delivery.timeout.ms", "1500").option("kafka.max.block.ms", "1500")
         .option("kafka.request.timeout.ms", "1000").save())
    assert _check(values, bs, topic, 3).ok
    # ... and read_uncommitted shows the aborted records are really there, just not visible.
    assert len(read_values(bs, topic, 3, read_committed=False)) > len(values)


def _copy(spark: Any, bs: str, src: str, dst: str, ck: Path, guarantee: str) -> None:
    q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "100")
         .option("kafka.isolation.level", "read_committed").load()
         .selectExpr("key", "value").writeStream.format("odradek")
         .option("kafka.bootstrap.servers", bs).option("topic", dst)
         .option("deliveryGuarantee", guarantee)
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None, q.exception()


def _forget_last_commit(ck: Path) -> int:
    """What a driver killed between the sink's commit and Spark's commit log leaves: the
    batch's offsets are logged, its commit is not."""
    last = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    (ck / "commits" / str(last)).unlink()
    crc = ck / "commits" / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_replayed_micro_batch(spark: Any, cluster: Cluster, tmp_path: Path,
                              guarantee: str) -> None:
    bs = bootstrap(cluster)
    src, dst = topic_name("eos-src"), topic_name("eos-dst")
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    produced = produce(bs, src, 2, 400, with_headers=False)
    inputs = [r.value.decode() for r in produced]
    _copy(spark, bs, src, dst, tmp_path / "ck", guarantee)
    first = _check(inputs, bs, dst, 2)
    assert first.ok and first.row("duplicates").observed == 0, first.to_text()
    _forget_last_commit(tmp_path / "ck")
    more = produce(bs, src, 2, 100, start=400, with_headers=False)
    _copy(spark, bs, src, dst, tmp_path / "ck", guarantee)
    check = _check(inputs + [r.value.decode() for r in more], bs, dst, 2, guarantee)
    assert check.ok and check.row("lost").observed == 0, check.to_text()
    if guarantee == "exactly-once":
        assert check.row("duplicates").observed == 0, check.to_text()
    else:  # the replayed batch (100 records) is written twice: expected, not a failure
        dups = check.row("duplicates")
        assert (dups.observed, dups.verdict) == (100, "expected"), check.to_text()


def test_option_errors(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("eos-opts")
    create_topic(bs, topic, 1)
    df = spark.createDataFrame([("x",)], "value string")

    def write(**opts: str) -> None:
        w = (df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bs)
             .option("topic", topic))
        for k, v in opts.items():
            w = w.option(k, v)
        w.save()

    with pytest.raises(Exception, match="deliveryGuarantee must be"):
        write(deliveryGuarantee="twice")
    with pytest.raises(Exception, match="INVALID_TRANSACTION_TIMEOUT"):
        write(deliveryGuarantee="exactly-once", **{"kafka.transaction.timeout.ms": "3600000"})
    assert read_values(bs, topic, 1) == []
