"""dump-log's ``--transaction-log-decoder``: a `__transaction_state` record as Kafka's
DumpLogSegments prints it (``TransactionLog.formatRecordKeyAndValue``).

Tools may not import the coordinator layer, whose ``transaction_log`` module owns this format, so
the two version-0 schemas are read here again with the protocol layer's primitives (a test checks
that both give the same strings for the same bytes):

  key v0    transactional_id string
  value v0  producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
            transaction_status int8, transaction_partitions [topic string, [int32]] (nullable),
            transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64
"""

from __future__ import annotations

from ..protocol.primitives import Reader, SchemaError

# The status byte -> Kafka's TransactionState name.
STATE_NAMES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
               4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
EMPTY = 0


def format_record_key_and_value(key: bytes | memoryview | None,
                                value: bytes | memoryview | None) -> tuple[str, str]:
    """(key string, value string): ``transaction_metadata::transactionalId=ID`` and
    ``producerId:P,producerEpoch:E,state=S,partitions=[t-0,...],txnLastUpdateTimestamp=T,
    txnTimeoutMs=M`` (``<DELETE>`` for a tombstone); partitions sorted. A key or value of an
    unknown version or status raises SchemaError."""
    if key is None:
        raise SchemaError("a transaction log record has a key")
    r = Reader(key)
    version = r.int16()
    if version != 0:
        raise SchemaError(f"unknown transaction log key version {version}")
    key_string = f"transaction_metadata::transactionalId={r.string()}"
    if value is None:
        return key_string, "<DELETE>"
    r = Reader(value)
    version = r.int16()
    if version != 0:
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
    last_update = r.int64()
    r.int64()  # the transaction's start time: not printed by Kafka
    if status not in STATE_NAMES:
        raise SchemaError(f"no transaction state has the status byte {status}")
    shown = "" if status == EMPTY else ",".join(f"{t}-{p}" for t, p in sorted(set(partitions)))
    return key_string, (f"producerId:{producer_id},producerEpoch:{producer_epoch},"
                        f"state={STATE_NAMES[status]},partitions=[{shown}],"
                        f"txnLastUpdateTimestamp={last_update},txnTimeoutMs={timeout_ms}")
