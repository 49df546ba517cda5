"""Writing DataFrames to odradek topics (S-9.1), batch and streaming, as Spark's Kafka sink does.

Columns (KafkaWriter's): `value` (string or binary, required), `key` (string or binary),
`topic` (string; the `topic` option wins when given), `partition` (int), `headers`
(array<struct<key:string,value:binary>>). Each task sends its rows through one idempotent
producer (`enable.idempotence=true`, `acks=all` unless `kafka.`-options say otherwise; every
`kafka.`-prefixed option goes to the producer), flushes before returning its commit message, and
fails if any record was not delivered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from ..client._loop import LoopThread
from ..client.errors import KafkaError
from ..client.producer import AsyncProducer
from ..client.types import RecordMetadata
from .offsets import OptionError, kafka_params

log = logging.getLogger("odradek.spark")

HEADERS_DDL = "array<struct<key:string,value:binary>>"


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote (pickled back to the driver)."""

    records: int
    partition_id: int = -1


@dataclass(frozen=True)
class WritePlan:
    """Where the columns are and how to read them, checked on the driver (KafkaWriter's
    validateQuery)."""

    topic: str | None
    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool


def _is_headers(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = t.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key"
            and isinstance(fields[0].dataType, StringType) and fields[1].name == "value"
            and isinstance(fields[1].dataType, BinaryType))


def plan_write(schema: StructType, options: Mapping[str, str]) -> WritePlan:
    """Validate the DataFrame's schema and options with Spark's messages."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    topic = options.get("topic")
    topic = topic.strip() if topic is not None else None
    if topic is None and "topic" not in types:
        raise OptionError("topic option required when no 'topic' attribute is present. "
                          "Use the topic option for setting a topic.")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError("topic attribute type must be a string")
    if "value" not in types:
        raise OptionError("Required attribute 'value' not found")
    for name in ("value", "key"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a string or binary")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError("partition attribute type must be an int")
    if "headers" in types and not _is_headers(types["headers"]):
        raise OptionError(f"headers attribute type must be a {HEADERS_DDL}")
    for name in ("key.serializer", "value.serializer"):
        if f"kafka.{name}" in options:
            raise OptionError(f"Kafka option '{name}' is not supported as "
                              f"{name.split('.')[0]}s are serialized with ByteArraySerializer.")
    if "kafka.bootstrap.servers" not in options:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring "
                          "Kafka producer")
    return WritePlan(topic, "key" in types, "topic" in types, "partition" in types,
                     "headers" in types)


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()
    raise KeyError(name)


class _Deliveries:
    """The delivery futures of the records sent so far; done ones are checked and dropped as
    the write goes on (runs on the producer's loop)."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[RecordMetadata]] = []
        self.delivered = 0
        self.error: BaseException | None = None

    def settle(self) -> None:
        still = []
        for f in self.pending:
            if not f.done():
                still.append(f)
            elif f.cancelled():
                self.error = self.error or KafkaError("a record's delivery was cancelled")
            elif f.exception() is not None:
                self.error = self.error or f.exception()
            else:
                self.delivered += 1
        self.pending = still


async def _send_rows(producer: AsyncProducer, rows: list[tuple[Any, ...]],
                     deliveries: _Deliveries) -> None:
    for topic, value, key, partition, headers in rows:
        try:
            deliveries.pending.append(await producer.send(topic, value, key,
                                                          partition=partition, headers=headers))
        except KafkaError as exc:  # refused before sending (unknown partition, too large...)
            deliveries.error = deliveries.error or exc
            break
    deliveries.settle()


async def _start_producer(cfg: dict[str, Any]) -> AsyncProducer:
    p = AsyncProducer(cfg)
    try:
        return await p.start()
    except BaseException:
        await p.client.close()
        raise


async def _finish(producer: AsyncProducer, deliveries: _Deliveries) -> int:
    left = await producer.flush()
    deliveries.settle()
    return left


def _rows(batch: pa.RecordBatch, plan: WritePlan) -> list[tuple[Any, ...]]:
    n = batch.num_rows
    values = _column(batch, "value")
    keys = _column(batch, "key") if plan.has_key else [None] * n
    topics = [plan.topic] * n if plan.topic is not None else _column(batch, "topic")
    parts = _column(batch, "partition") if plan.has_partition else [None] * n
    headers = _column(batch, "headers") if plan.has_headers else [None] * n
    if plan.topic is None and any(t is None for t in topics):
        raise OptionError("null topic present in the data. Use the topic option for setting "
                          "a topic.")
    return [(topics[i], values[i], keys[i], parts[i],
             [(h["key"], h["value"]) for h in headers[i]] if headers[i] else None)
            for i in range(n)]


def write_batches(batches: Iterator[pa.RecordBatch], plan: WritePlan,
                  producer_config: Mapping[str, Any]) -> int:
    """Send every row of `batches` through one idempotent producer; returns the number of
    records delivered. The rows of one Arrow batch are handed to the producer's loop at once
    (the next batch is read while they are sent); the first delivery error fails the write."""
    cfg: dict[str, Any] = {"enable.idempotence": "true", "acks": "all",
                           "client.id": "odradek-spark-writer"}
    cfg.update(producer_config)
    runner = LoopThread("odradek-spark-writer")
    deliveries = _Deliveries()
    try:
        producer: AsyncProducer = runner.run(_start_producer(cfg))
        try:
            sent = 0
            previous: concurrent.futures.Future[None] | None = None
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                rows = _rows(batch, plan)
                if previous is not None:
                    previous.result()
                if deliveries.error is not None:
                    break
                previous = runner.submit(_send_rows(producer, rows, deliveries))
                sent += len(rows)
            if previous is not None:
                previous.result()
            left = runner.run(_finish(producer, deliveries))
        finally:
            runner.run(producer.close())
    finally:
        runner.stop()
    if deliveries.error is not None:
        raise KafkaError(f"Writing to odradek failed: {deliveries.error}") from deliveries.error
    if left:
        raise KafkaError(f"Writing to odradek failed: {left} of {sent} records were not "
                         "delivered")
    return deliveries.delivered


class _Writer:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.plan = plan_write(schema, options)
        self.producer_config = kafka_params(options)

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        return WriteResult(write_batches(iterator, self.plan, self.producer_config),
                           ctx.partitionId() if ctx is not None else -1)


class OdradekBatchWriter(_Writer, DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("Wrote %d records to odradek", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.warning("Write aborted; %d records had been delivered by tasks that finished", done)


class OdradekStreamWriter(_Writer, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("Micro-batch %d: wrote %d records to odradek", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.warning("Micro-batch %d aborted; %d records had been delivered", batchId, done)
