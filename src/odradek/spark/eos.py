"""The sink's exactly-once delivery (`deliveryGuarantee=exactly-once`): a two-phase commit over
Kafka transactions (KIP-98), as Flink's KafkaSink does it with its DeliveryGuarantee.EXACTLY_ONCE.

Phase one, on the executors (`write_transactional`): each task writes its rows in a transaction
whose transactional id is `<transactionalIdPrefix>-<Spark partition id>`, stable across attempts
and restarts, so a retried or speculative attempt's InitProducerId fences the earlier attempt
(the coordinator aborts its transaction). The task flushes, does not commit, and returns the
open transaction (transactional id, producer id, epoch) in its WriterCommitMessage.

Phase two, on the driver (`commit_all` from the writer's commit): EndTxn COMMIT for each, through
`odradek.client.two_phase.finish_transactions`; abort() aborts them. Nothing is visible to
read_committed readers before the driver commits.

Replays: a streaming task also commits, inside its transaction, the micro-batch id as the
offset (and metadata) of a marker partition for the consumer group named after its
transactional id (TxnOffsetCommit, as consume-transform-produce commits its input offsets). A
query restarted after its driver committed the Kafka transactions but before Spark recorded the
batch runs the batch again; each task reads its group's committed batch id after its
InitProducerId (which first completes any pending transaction of the id) and writes nothing
when the batch is already committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from kio.schema.errors import ErrorCode

from ..client import Admin, KafkaError, OffsetAndMetadata, TopicPartition
from ..client.two_phase import (
    PreparedTransaction,
    TransactionLostError,
    TwoPhaseProducer,
    finish_transactions,
)
from .offsets import OptionError

log = logging.getLogger("odradek.spark")

AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
# Kafka's broker default transaction.max.timeout.ms: a micro-batch may take up to 15 minutes
# between its first task's InitProducerId and the driver's commit.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
MARKER = "odradek-spark batch "
BATCH_ID_KEY = "streaming.sql.batchId"  # Spark's MicroBatchExecution.BATCH_ID_KEY
QUERY_ID_KEY = "sql.streaming.queryId"  # Spark's StreamExecution.QUERY_ID_KEY


@dataclass(frozen=True)
class Delivery:
    """The sink's delivery options, parsed on the driver."""

    guarantee: str = AT_LEAST_ONCE
    prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE


def parse_delivery(options: Mapping[str, str], default_prefix: str | None) -> Delivery:
    g = options.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower().replace("_", "-")
    if g not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise OptionError(f"deliveryGuarantee must be '{AT_LEAST_ONCE}' or '{EXACTLY_ONCE}', "
                          f"got '{options.get('deliveryguarantee')}'")
    if g == AT_LEAST_ONCE:
        return Delivery()
    if "kafka.transactional.id" in options:
        raise OptionError("Kafka option 'transactional.id' is not supported: the sink derives "
                          "one per Spark partition from transactionalIdPrefix")
    raw = options.get("kafka.transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
    try:
        timeout = int(raw)
    except ValueError:
        timeout = -1
    if timeout <= 0:
        raise OptionError(f"kafka.transaction.timeout.ms must be a positive number of "
                          f"milliseconds, got '{raw}'")
    prefix = options.get("transactionalidprefix") or default_prefix
    return Delivery(g, prefix, timeout)


def checkpoint_prefix(options: Mapping[str, str]) -> str | None:
    """A prefix stable across restarts of a query: one derived from its checkpoint location."""
    loc = options.get("checkpointlocation")
    if not loc:
        return None
    import hashlib
    return "odradek-spark-" + hashlib.sha256(loc.rstrip("/").encode()).hexdigest()[:16]


@dataclass
class TaskTxn:
    """What a task of the exactly-once sink hands the driver."""

    prepared: PreparedTransaction | None
    began_ms: int
    skipped_batch: bool = False


def _task_identity(prefix: str | None) -> tuple[str, int, int | None]:
    """(transactional id, Spark partition id, micro-batch id or None) of the running task."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    batch = ctx.getLocalProperty(BATCH_ID_KEY) if ctx is not None else None
    if prefix is None:
        query = ctx.getLocalProperty(QUERY_ID_KEY) if ctx is not None else None
        if query is None:
            raise OptionError("transactionalIdPrefix is required with "
                              "deliveryGuarantee=exactly-once here")
        prefix = f"odradek-spark-{query}"
    return f"{prefix}-{partition}", partition, None if batch is None else int(batch)


def committed_batch(config: Mapping[str, Any], group: str) -> int:
    """The last micro-batch id the sink's task committed for `group` (-1: none)."""
    cfg = {k: v for k, v in config.items() if k not in _PRODUCER_ONLY}
    with Admin(cfg) as admin:
        offsets = admin.list_consumer_group_offsets(group)
    batches = [om.offset for om in offsets.values() if (om.metadata or "").startswith(MARKER)]
    return max(batches, default=-1)


_PRODUCER_ONLY = frozenset({
    "acks", "linger.ms", "batch.size", "compression.type", "enable.idempotence",
    "transaction.timeout.ms", "transactional.id", "max.in.flight.requests.per.connection",
    "delivery.timeout.ms", "buffer.memory", "retries", "max.block.ms", "partitioner",
    "max.request.size", "queue.buffering.max.messages"})


def write_transactional(batches: Iterator[pa.RecordBatch], rows_of: Any,
                        producer_config: Mapping[str, Any], delivery: Delivery
                        ) -> tuple[int, TaskTxn]:
    """Phase one: write the task's rows in its transaction and leave it open (flushed)."""
    tid, _, batch_id = _task_identity(delivery.prefix)
    cfg: dict[str, Any] = {"client.id": f"odradek-spark-{tid}", "acks": "all"}
    cfg.update(producer_config)
    cfg.update({"enable.idempotence": "true", "transactional.id": tid,
                "transaction.timeout.ms": str(delivery.transaction_timeout_ms)})
    began = int(time.time() * 1000)
    with TwoPhaseProducer(cfg) as producer:
        try:
            producer.begin()
        except KafkaError as exc:
            if exc.code == ErrorCode.invalid_transaction_timeout:
                raise OptionError(
                    f"kafka.transaction.timeout.ms={delivery.transaction_timeout_ms} was "
                    "refused by the transaction coordinator (INVALID_TRANSACTION_TIMEOUT): it "
                    "must be at most the brokers' transaction.max.timeout.ms") from exc
            raise
        if batch_id is not None and committed_batch(producer_config, tid) >= batch_id:
            log.info("%s: micro-batch %d already committed, not written again", tid, batch_id)
            return 0, TaskTxn(None, began, skipped_batch=True)
        marker: str | None = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                rows = rows_of(batch)
                if marker is None:
                    marker = rows[0][0]
                producer.send_rows(rows)
                if producer.errors:
                    break
            if batch_id is not None and marker is not None and not producer.errors:
                producer.send_offsets(
                    {TopicPartition(marker, 0): OffsetAndMetadata(batch_id,
                                                                  f"{MARKER}{batch_id}")}, tid)
            prepared = producer.prepare()
        except BaseException:
            try:
                producer.abort(10.0)
            except Exception as exc:  # the retried attempt's InitProducerId aborts it anyway
                log.warning("%s: abort after a failed write failed: %s", tid, exc)
            raise
        return producer.delivered, TaskTxn(prepared, began)


def commit_all(config: Mapping[str, Any], txns: Sequence[TaskTxn], delivery: Delivery,
               what: str) -> None:
    """Phase two: commit every task's transaction (EndTxn COMMIT from the driver)."""
    prepared = [t.prepared for t in txns if t.prepared is not None]
    if not prepared:
        return
    started = time.monotonic()
    try:
        finish_transactions(config, prepared, commit=True)
    except TransactionLostError as exc:
        oldest = min(t.began_ms for t in txns if t.prepared is not None)
        took = int(time.time() * 1000) - oldest
        if took >= delivery.transaction_timeout_ms:
            raise OptionError(
                f"{what} took {took} ms from its first transaction to its commit, more than "
                f"kafka.transaction.timeout.ms={delivery.transaction_timeout_ms}: the "
                "coordinator aborted the transactions. Raise kafka.transaction.timeout.ms "
                "(at most the brokers' transaction.max.timeout.ms) or make batches smaller."
            ) from exc
        raise
    log.info("%s: committed %d transactions in %.0f ms", what, len(prepared),
             (time.monotonic() - started) * 1000)


def abort_all(config: Mapping[str, Any], txns: Sequence[TaskTxn]) -> None:
    prepared = [t.prepared for t in txns if t.prepared is not None]
    if prepared:
        finish_transactions(config, prepared, commit=False)
