"""The records of `__transaction_state` as bytes (Kafka 2.8's generated TransactionLogKey and
TransactionLogValue, read by ``TransactionLog``): what the transaction coordinator loads
(coordinator/transaction_log.py builds its metadata from `read_value`) and what dump-log's
``--transaction-log-decoder`` prints (`format_record_key_and_value`, Kafka's
``TransactionLog.formatRecordKeyAndValue``).

Key and value start with an int16 schema version; Kafka 2.8 knows only version 0 of each, and
neither is flexible: strings are int16 length + UTF-8, arrays int32 count + elements (-1 = null).

  key v0    transactional_id string
  value v0  producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
            transaction_status int8 (the TransactionState byte),
            transaction_partitions [topic string, partition_ids [int32]] (nullable),
            transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64

A null value is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass

from .primitives import Reader, SchemaError

KEY_VERSION = 0  # TransactionLogKey.HIGHEST_SUPPORTED_VERSION in 2.8
VALUE_VERSION = 0  # TransactionLogValue.HIGHEST_SUPPORTED_VERSION in 2.8

# The status byte -> Kafka's TransactionState name.
STATE_NAMES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
               4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
EMPTY_STATUS = 0


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """A decoded value v0; `partitions` as (topic, partition) pairs in the record's order."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: int
    partitions: tuple[tuple[str, int], ...]
    last_update_timestamp_ms: int
    start_timestamp_ms: int


def read_key(data: bytes | memoryview | None) -> str:
    """The transactional id of a key; a missing key or an unknown version is a SchemaError."""
    if data is None:
        raise SchemaError("a transaction log record has a key")
    r = Reader(data)
    version = r.int16()
    if version != KEY_VERSION:
        raise SchemaError(f"unknown transaction log key version {version}")
    return r.string()


def read_value(data: bytes | memoryview | None) -> TxnLogValue | None:
    """A value, None for a tombstone; an unknown version or status byte is a SchemaError."""
    if data is None:
        return None
    r = Reader(data)
    version = r.int16()
    if version != VALUE_VERSION:
        raise SchemaError(f"unknown transaction log value version {version}")
    producer_id, producer_epoch, timeout_ms = r.int64(), r.int16(), r.int32()
    status = r.take(1)[0]
    status = status - 256 if status > 127 else status
    partitions: list[tuple[str, int]] = []
    for _ in range(max(r.int32(), 0)):
        topic = r.string()
        n = r.int32()
        if n < 0:
            raise SchemaError("null in the non-nullable array partition_ids")
        partitions += [(topic, r.int32()) for _ in range(n)]
    last_update, start = r.int64(), r.int64()
    if status not in STATE_NAMES:
        raise SchemaError(f"no transaction state has the status byte {status}")
    return TxnLogValue(producer_id, producer_epoch, timeout_ms, status, tuple(partitions),
                       last_update, start)


def format_record_key_and_value(key: bytes | memoryview | None,
                                value: bytes | memoryview | None) -> tuple[str, str]:
    """(key string, value string) as Kafka's DumpLogSegments prints a `__transaction_state`
    record: ``transaction_metadata::transactionalId=ID`` and ``producerId:P,producerEpoch:E,
    state=S,partitions=[t-0,...],txnLastUpdateTimestamp=T,txnTimeoutMs=M`` (``<DELETE>`` for a
    tombstone); partitions sorted, none shown for an Empty transaction."""
    key_string = f"transaction_metadata::transactionalId={read_key(key)}"
    v = read_value(value)
    if v is None:
        return key_string, "<DELETE>"
    shown = ("" if v.status == EMPTY_STATUS
             else ",".join(f"{t}-{p}" for t, p in sorted(set(v.partitions))))
    return key_string, (f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},"
                        f"state={STATE_NAMES[v.status]},partitions=[{shown}],"
                        f"txnLastUpdateTimestamp={v.last_update_timestamp_ms},"
                        f"txnTimeoutMs={v.transaction_timeout_ms}")
