"""Writing DataFrames to odradek topics (S-9.1), batch and streaming, as Spark's Kafka sink does.

Columns (KafkaWriter's): `value` (string or binary, required), `key` (string or binary),
`topic` (string; the `topic` option wins when given), `partition` (int), `headers`
(array<struct<key:string,value:binary>>). Each task sends its rows through one idempotent
producer (`enable.idempotence=true`, `acks=all` unless `kafka.`-options say otherwise; every
`kafka.`-prefixed option goes to the producer), flushes before returning its commit message, and
fails if any record was not delivered.

`deliveryGuarantee` (Flink's KafkaSink option names): `at-least-once` (the default, the above)
or `exactly-once`: a two-phase commit over Kafka transactions (`eos`), each task writing in a
transaction `<transactionalIdPrefix>-<partition>` that the driver commits; see docs/spark.md.
"""

from __future__ import annotations

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

from ..client import KafkaError, Producer, RecordMetadata
from .eos import (
    Delivery,
    TaskTxn,
    abort_all,
    checkpoint_prefix,
    commit_all,
    parse_delivery,
    write_transactional,
)
from .offsets import OptionError, kafka_params

log = logging.getLogger("odradek.spark")

HEADERS_DDL = "array<struct<key:string,value:binary>>"


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote (pickled back to the driver)."""

    records: int
    partition_id: int = -1
    txn: TaskTxn | None = None  # exactly-once: the task's open transaction


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


class _Outcome:
    """The delivery callback of a task's records: counts the delivered ones and keeps the first
    error (called on the producer's loop thread, read on the task's)."""

    def __init__(self) -> None:
        self.delivered = 0
        self.error: BaseException | None = None

    def __call__(self, err: KafkaError | None, md: RecordMetadata | None) -> None:
        if err is None:
            self.delivered += 1
        elif self.error is None:
            self.error = err


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
    """Send every row of `batches` through one idempotent producer (odradek.client's Producer);
    returns the number of records delivered. Rows are queued to the producer's loop thread,
    which sends them while the next Arrow batch is read; its buffer bounds what is in flight
    (buffer.memory, max.block.ms). The first delivery error stops the write and fails it."""
    cfg: dict[str, Any] = {"enable.idempotence": "true", "acks": "all",
                           "client.id": "odradek-spark-writer"}
    cfg.update(producer_config)
    outcome = _Outcome()
    sent = 0
    with Producer(cfg) as producer:  # close() delivers what is still buffered
        send = producer.send
        for batch in batches:
            if outcome.error is not None:
                break
            if batch.num_rows == 0:
                continue
            for topic, value, key, partition, headers in _rows(batch, plan):
                try:
                    send(topic, value, key, partition=partition, headers=headers,
                         on_delivery=outcome)
                except KafkaError as exc:  # refused before sending (too large, buffer full...)
                    outcome.error = outcome.error or exc
                    break
                sent += 1
        left = producer.flush()
    if outcome.error is not None:
        raise KafkaError(f"Writing to odradek failed: {outcome.error}") from outcome.error
    if left:
        raise KafkaError(f"Writing to odradek failed: {left} of {sent} records were not "
                         "delivered")
    return outcome.delivered


class _Writer:
    def __init__(self, options: Mapping[str, str], schema: StructType,
                 default_prefix: str | None) -> None:
        self.plan = plan_write(schema, options)
        self.producer_config = kafka_params(options)
        self.delivery: Delivery = parse_delivery(options, default_prefix)

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx is not None else -1
        if self.delivery.exactly_once:
            plan = self.plan
            n, txn = write_transactional(iterator, lambda b: _rows(b, plan),
                                         self.producer_config, self.delivery)
            return WriteResult(n, pid, txn)
        return WriteResult(write_batches(iterator, self.plan, self.producer_config), pid)

    def _txns(self, messages: list[WriterCommitMessage | None]) -> list[TaskTxn]:
        return [m.txn for m in messages if isinstance(m, WriteResult) and m.txn is not None]

    def _commit(self, messages: list[WriterCommitMessage | None], what: str) -> None:
        if self.delivery.exactly_once:
            commit_all(self.producer_config, self._txns(messages), self.delivery, what)

    def _abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.delivery.exactly_once:
            abort_all(self.producer_config, self._txns(messages))


class OdradekBatchWriter(_Writer, DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        # One write: a fresh prefix unless given (its retried tasks share it and fence).
        import uuid
        super().__init__(options, schema, f"odradek-spark-write-{uuid.uuid4().hex[:12]}")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._commit(messages, "The write")
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("Wrote %d records to odradek", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages)
        done = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.warning("Write aborted; %d records had been delivered by tasks that finished", done)


class OdradekStreamWriter(_Writer, DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        # Stable across restarts: from the checkpoint location, else (on the executors) from
        # the query id that Spark keeps in the checkpoint.
        super().__init__(options, schema, checkpoint_prefix(options))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._commit(messages, f"Micro-batch {batchId}")
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("Micro-batch %d: wrote %d records to odradek", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(messages)
        done = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.warning("Micro-batch %d aborted; %d records had been delivered", batchId, done)
