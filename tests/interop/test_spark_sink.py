"""The `odradek` Spark data source, writing (S-9.1): a DataFrame's rows (value, key, partition,
headers, topic column or option) go through the idempotent producer and a real client
(confluent-kafka) reads exactly them back; schema errors carry Spark's KafkaWriter messages; a
Structured Streaming query copies one topic to another through the stream writer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.cluster import Cluster
from tests.interop.clients import batch_headers, consume_confluent, watermarks
from tests.interop.spark_helpers import (
    bootstrap,
    create_topic,
    produce,
    start_cluster,
    topic_name,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = start_cluster(1)
    try:
        yield c
    finally:
        c.stop()


def writer(df: Any, c: Cluster, **options: str) -> Any:
    w = df.write.format("odradek").mode("append").option("kafka.bootstrap.servers",
                                                         bootstrap(c))
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_batch_write_is_read_back_exactly_by_confluent_kafka(spark: Any,
                                                             cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("spark-sink")
    create_topic(bs, topic, 3)
    rows = [(None if i % 5 == 0 else f"k{i}", f"value {i}".encode() * (1 + i % 4), i % 3,
             [("n", str(i).encode()), ("none", None)] if i % 2 else [])
            for i in range(500)]
    df = spark.createDataFrame(
        rows, "key string, value binary, partition int, "
              "headers array<struct<key:string,value:binary>>").repartition(3)
    writer(df, cluster, topic=topic, **{"kafka.linger.ms": "5"}).save()

    got = consume_confluent(bs, topic, 3, 500)
    want = Counter((p, None if k is None else k.encode(), v, tuple(h)) for k, v, p, h in rows)
    assert Counter((m.partition, m.key, m.value, m.headers) for m in got) == want
    assert sum(high for _, high in watermarks(bs, topic, 3).values()) == 500  # no duplicates
    # Written by the idempotent producer: every stored batch carries a producer id.
    assert cluster.inner is not None
    log_dir = cluster.inner.data_dir / "broker-0"
    batches = [h for p in range(3) for h in batch_headers(log_dir, topic, p)]
    assert batches and all(h["pid"] >= 0 and h["base_seq"] >= 0 for h in batches)


def test_topic_column_routes_rows_and_errors_are_clear(spark: Any, cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    a, b = topic_name("spark-sink-a"), topic_name("spark-sink-b")
    create_topic(bs, a, 1)
    create_topic(bs, b, 1)
    df = spark.createDataFrame([(a if i % 3 else b, f"v{i}") for i in range(30)],
                               "topic string, value string")
    writer(df, cluster).save()
    got_a = consume_confluent(bs, a, 1, 20)
    got_b = consume_confluent(bs, b, 1, 10)
    assert sorted(m.value for m in got_a) == sorted(f"v{i}".encode() for i in range(30) if i % 3)
    assert sorted(m.value for m in got_b) == sorted(f"v{i}".encode() for i in range(0, 30, 3))
    assert all(m.key is None for m in got_a + got_b)

    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        writer(spark.createDataFrame([("x",)], "key string"), cluster, topic=a).save()
    with pytest.raises(Exception, match="topic option required when no 'topic' attribute"):
        writer(spark.createDataFrame([("x",)], "value string"), cluster).save()
    with pytest.raises(Exception, match="value attribute type must be a string or binary"):
        writer(spark.createDataFrame([(1,)], "value int"), cluster, topic=a).save()


def test_streaming_copy_between_topics(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    bs = bootstrap(cluster)
    src, dst = topic_name("spark-src"), topic_name("spark-dst")
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    produced = produce(bs, src, 2, 200, with_headers=False)
    q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
         .option("subscribe", src).option("startingOffsets", "earliest").load()
         .selectExpr("key", "value", "partition").writeStream.format("odradek")
         .option("kafka.bootstrap.servers", bs).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start())
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None
    got = consume_confluent(bs, dst, 2, 200)
    assert sum(high for _, high in watermarks(bs, dst, 2).values()) == 200  # no duplicates
    assert Counter((m.partition, m.key, m.value) for m in got) == Counter(
        (r.partition, r.key, r.value) for r in produced)


def test_undeliverable_records_fail_the_write(spark: Any, cluster: Cluster) -> None:
    """A record the producer refuses or cannot deliver (here: a partition that does not exist)
    fails the task, and the job, with the producer's error."""
    bs = bootstrap(cluster)
    topic = topic_name("spark-sink-bad")
    create_topic(bs, topic, 1)
    df = spark.createDataFrame([("v", 5)], "value string, partition int")
    with pytest.raises(Exception, match="Writing to odradek failed"):
        writer(df, cluster, topic=topic, **{"kafka.delivery.timeout.ms": "1500",
                                            "kafka.max.block.ms": "1500",
                                            "kafka.request.timeout.ms": "1000",
                                            "kafka.linger.ms": "0"}).save()
