"""The records of `__transaction_state` (Kafka 2.8's TransactionLog, with the generated
TransactionLogKey and TransactionLogValue of core/src/main/resources/common/message), byte for byte.

The transaction state manager writes and loads these (transaction_state_manager.py); reading
the bytes, and formatting them as dump-log prints them, is protocol/transaction_log_records.py,
shared with the tools.

The layout of key v0 and value v0 is in protocol/transaction_log_records.py's docstring.

An Empty transaction is written with a null partitions array (and partitions are ignored when an
Empty one is read); other states group their partitions by topic. Kafka's order of topics and
partitions is that of a hash set, i.e. unspecified; here both are sorted, so equal metadata gives
equal bytes. The last producer id and epoch are not stored: a loaded metadata has none. A null
value is a tombstone, written when a transactional id expires (Dead): reading one gives None.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import groupby

from ..common import TopicPartition
from ..protocol.primitives import INT16, INT32, INT64, SchemaError, write_string
from ..protocol.records import NO_PRODUCER_ID
from ..protocol.transaction_log_records import (
    KEY_VERSION,
    VALUE_VERSION,
    read_key,
    read_value,
)
from .transaction_state import (
    NO_PRODUCER_EPOCH,
    Empty,
    IllegalTransactionState,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

INT8 = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class TxnKey:
    """Kafka's TxnKey: a decoded key."""

    transactional_id: str
    version: int = KEY_VERSION


def key_to_bytes(transactional_id: str) -> bytes:
    """TransactionLog.keyToBytes: version 0, the transactional id."""
    out = bytearray(INT16.pack(KEY_VERSION))
    write_string(out, transactional_id)
    return bytes(out)


def value_to_bytes(transit: TxnTransitMetadata) -> bytes:
    """TransactionLog.valueToBytes: version 0 of the target metadata. An Empty transaction with
    partitions is an IllegalTransactionState, as in Kafka."""
    if transit.txn_state is Empty and transit.topic_partitions:
        raise IllegalTransactionState(
            f"an Empty transaction has no partitions, not {sorted(transit.topic_partitions)}")
    out = bytearray(INT16.pack(VALUE_VERSION))
    out += INT64.pack(transit.producer_id)
    out += INT16.pack(transit.producer_epoch)
    out += INT32.pack(transit.txn_timeout_ms)
    out += INT8.pack(transit.txn_state.id)
    if transit.txn_state is Empty:
        out += INT32.pack(-1)  # a null array
    else:
        by_topic = [(topic, [tp.partition for tp in tps])
                    for topic, tps in groupby(sorted(transit.topic_partitions),
                                              key=lambda tp: tp.topic)]
        out += INT32.pack(len(by_topic))
        for topic, partitions in by_topic:
            write_string(out, topic)
            out += INT32.pack(len(partitions))
            for p in partitions:
                out += INT32.pack(p)
    out += INT64.pack(transit.txn_last_update_timestamp)
    out += INT64.pack(transit.txn_start_timestamp)
    return bytes(out)


def read_txn_record_key(data: bytes | memoryview) -> TxnKey:
    """TransactionLog.readTxnRecordKey; an unknown version is a SchemaError."""
    return TxnKey(read_key(data), KEY_VERSION)


def read_txn_record_value(transactional_id: str,
                          data: bytes | memoryview | None) -> TransactionMetadata | None:
    """TransactionLog.readTxnRecordValue: the metadata a value holds, None for a tombstone. An
    unknown version or status byte is a SchemaError."""
    value = read_value(data)
    if value is None:
        return None
    try:
        state = TransactionState.from_id(value.status)
    except IllegalTransactionState as exc:
        raise SchemaError(str(exc)) from None
    partitions = {TopicPartition(t, p) for t, p in value.partitions}
    return TransactionMetadata(
        transactional_id, value.producer_id, NO_PRODUCER_ID, value.producer_epoch,
        NO_PRODUCER_EPOCH, value.transaction_timeout_ms, state,
        set() if state is Empty else partitions, value.start_timestamp_ms,
        value.last_update_timestamp_ms)
