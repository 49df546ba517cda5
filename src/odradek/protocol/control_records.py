"""Control batches and transaction markers (KIP-98), in Kafka's formats: Kafka's
``ControlRecordType`` (the control record's key), ``EndTransactionMarker`` (its value) and
``MemoryRecords.withEndTransactionMarker`` (the whole batch).

WriteTxnMarkers builds markers with ``build_end_txn_marker_batch``; the log reads the marker of a
control batch (only its first record, as Kafka does) with ``end_txn_marker_of`` when the batch is
appended, replicated, recovered or replayed into the producer state.

A control batch is a magic-2 batch with the control (0x20) and transactional (0x10) attribute
bits, the producer id and epoch of the transaction, base sequence -1, and one record:

* key, 4 bytes: version int16 (0) | type int16 (ABORT 0, COMMIT 1);
* value of an end-transaction marker, 6 bytes: version int16 (0) | coordinator epoch int32.

Parsing follows Kafka's leniency: a key or value of a *newer* version is read as version 0 (the
schemas only grow at the end), a negative version or a short buffer is corrupt
(``InvalidRecordError``), and a type this broker does not know is ``UNKNOWN``. A control batch
with no record left (the cleaner removed the marker) carries no marker.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from .records import (
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    InvalidRecordError,
    build_batch,
    decode_records,
    read_header,
)

CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
CONTROL_RECORD_KEY_SIZE = _KEY.size  # 4
END_TXN_MARKER_VALUE_SIZE = _END_TXN_VALUE.size  # 6


class ControlRecordType(IntEnum):
    """The type in a control record's key (Kafka's ``ControlRecordType``)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


def control_record_key(control_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record (``ControlRecordType.recordKey``)."""
    if control_type == ControlRecordType.UNKNOWN:
        raise ValueError("cannot serialize the UNKNOWN control record type")
    return _KEY.pack(CONTROL_RECORD_KEY_VERSION, int(control_type))


def _versioned(what: str, data: bytes | None, unpack: struct.Struct) -> tuple[int, int]:
    """A control record's key or marker value: (version, field), a short or negative-version
    one raising InvalidRecordError."""
    if data is None or len(data) < unpack.size:
        raise InvalidRecordError(
            f"{what} of {0 if data is None else len(data)} bytes; at least {unpack.size} are "
            "needed")
    version, field = unpack.unpack_from(data)
    if version < 0:
        raise InvalidRecordError(f"{what} version {version}: corrupt data")
    return version, field


def parse_control_record_type(key: bytes | None) -> ControlRecordType:
    """The type in a control record's key (``ControlRecordType.parse``)."""
    _, type_id = _versioned("control record key", key, _KEY)
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the epoch of the coordinator that wrote it (Kafka's
    ``EndTransactionMarker``)."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"{self.control_type!r} is not an end transaction marker type")

    @property
    def is_abort(self) -> bool:
        return self.control_type == ControlRecordType.ABORT

    def key(self) -> bytes:
        return control_record_key(self.control_type)

    def value(self) -> bytes:
        """The 6-byte value (``EndTransactionMarker.serializeValue``)."""
        return _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def from_key_value(cls, key: bytes | None, value: bytes | None) -> EndTransactionMarker:
        """Read a marker from its record's key and value (``EndTransactionMarker.deserialize``);
        a key of another control type raises ValueError."""
        control_type = parse_control_record_type(key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"control record of type {control_type!r} is not a transaction marker")
        _, coordinator_epoch = _versioned("end transaction marker value", value, _END_TXN_VALUE)
        return cls(control_type, coordinator_epoch)


def build_end_txn_marker_batch(
    marker: EndTransactionMarker,
    producer_id: int,
    producer_epoch: int,
    *,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One control batch holding `marker` (``MemoryRecords.withEndTransactionMarker``):
    transactional and control bits, the transaction's producer id and epoch, no sequence, one
    uncompressed record stamped `timestamp_ms`, CRC32C over attributes onwards. The base offset
    (0 by default) and leader epoch are the log's to assign, as for any appended batch."""
    return build_batch(
        [(marker.key(), marker.value())],
        base_offset=base_offset,
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


@dataclass(frozen=True, slots=True)
class ControlBatch:
    """A control batch as read back: its header, the type of its (first) record, and the
    transaction marker when it is one. ``control_type`` is None for an emptied batch."""

    header: BatchHeader
    control_type: ControlRecordType | None
    marker: EndTransactionMarker | None


def is_control_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> bool:
    """Whether the batch at `position` has the control bit (header only)."""
    return read_header(buf, position).is_control


def parse_control_batch(batch: bytes | bytearray | memoryview) -> ControlBatch | None:
    """None for a data batch; for a control batch, its first record's type and (for COMMIT and
    ABORT) marker. The batch is not checked here: run ``records.check_batch`` first when its bytes
    are not already trusted."""
    header = read_header(batch, 0)
    if not header.is_control:
        return None
    records = decode_records(memoryview(batch)[:header.size])
    if not records:
        return ControlBatch(header, None, None)
    first = records[0]
    control_type = parse_control_record_type(first.key)
    marker = None
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        marker = EndTransactionMarker.from_key_value(first.key, first.value)
    return ControlBatch(header, control_type, marker)


def end_txn_marker_of(batch: bytes | bytearray | memoryview) -> EndTransactionMarker | None:
    """The COMMIT/ABORT marker of the control batch at the start of `batch` (its first record
    only, as Kafka's ``ProducerAppendInfo.append``); None for an emptied control batch (the
    cleaner removed its record) or a control record of another type. Raises InvalidRecordError
    / CorruptRecordError for an unreadable one."""
    parsed = parse_control_batch(batch)
    return None if parsed is None else parsed.marker
