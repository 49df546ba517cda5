"""Control records and transaction markers against golden bytes from Kafka's schemas
(ControlRecordType key v0, EndTransactionMarker value v0, a v2 control batch). The module is not
yet wired into the broker."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    control_record_key,
    is_control_batch,
    parse_control_batch,
    parse_control_record_type,
)
from odradek.protocol.records import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    InvalidRecordError,
    build_batch,
    check_batch,
    decode_records,
    scan_valid_prefix,
)

COMMIT_KEY = bytes.fromhex("0000" "0001")   # version 0, type COMMIT (1)
ABORT_KEY = bytes.fromhex("0000" "0000")    # version 0, type ABORT (0)


def test_type_ids_are_kafkas() -> None:
    assert ControlRecordType.ABORT == 0
    assert ControlRecordType.COMMIT == 1


def test_commit_marker_golden_key_and_value() -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, coordinator_epoch=0x01020304)
    assert marker.key() == COMMIT_KEY
    assert marker.value() == bytes.fromhex("0000" "01020304")  # version 0, coordinator epoch


def test_abort_marker_golden_key_and_value() -> None:
    marker = EndTransactionMarker(ControlRecordType.ABORT, coordinator_epoch=7)
    assert marker.key() == ABORT_KEY
    assert marker.value() == bytes.fromhex("0000" "00000007")
    assert marker.is_abort


def test_golden_bytes_of_a_whole_control_batch() -> None:
    marker = EndTransactionMarker(ControlRecordType.ABORT, coordinator_epoch=5)
    batch = build_end_txn_marker_batch(marker, producer_id=4000, producer_epoch=3,
                                       timestamp_ms=1_700_000_000_000)
    # The one record, field by field (DefaultRecord): length varint, attributes, timestamp delta
    # varlong, offset delta varint, key length + key, value length + value, header count.
    record = (bytes([16 << 1]) + b"\x00" + b"\x00" + b"\x00"
              + bytes([4 << 1]) + ABORT_KEY + bytes([6 << 1]) + bytes.fromhex("000000000005")
              + b"\x00")
    after_crc = (
        struct.pack(">h", 0x30)                      # attributes: transactional | control
        + struct.pack(">i", 0)                       # last offset delta
        + struct.pack(">q", 1_700_000_000_000)       # base timestamp
        + struct.pack(">q", 1_700_000_000_000)       # max timestamp
        + struct.pack(">q", 4000)                    # producer id
        + struct.pack(">h", 3)                       # producer epoch
        + struct.pack(">i", -1)                      # base sequence
        + struct.pack(">i", 1)                       # records count
        + record
    )
    expected = (
        struct.pack(">q", 0)                         # base offset
        + struct.pack(">i", 4 + 1 + 4 + len(after_crc))  # batch length
        + struct.pack(">i", -1)                      # partition leader epoch
        + struct.pack(">b", 2)                       # magic
        + struct.pack(">I", crc32c(after_crc))       # CRC32C
        + after_crc
    )
    assert batch == expected


@pytest.mark.parametrize("control_type", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_built_batch_passes_header_and_crc_validation_and_round_trips(
        control_type: ControlRecordType) -> None:
    marker = EndTransactionMarker(control_type, coordinator_epoch=12)
    batch = build_end_txn_marker_batch(marker, 77, 9, timestamp_ms=123, base_offset=0,
                                       partition_leader_epoch=4)
    header = check_batch(batch, 0, len(batch))
    assert [h.size for h in scan_valid_prefix(batch)] == [len(batch)]
    assert header.is_control and header.is_transactional
    assert header.attributes & (CONTROL_MASK | TRANSACTIONAL_MASK) == 0x30
    assert (header.base_offset, header.producer_id, header.producer_epoch) == (0, 77, 9)
    assert (header.base_sequence, header.records_count, header.last_offset_delta) == (-1, 1, 0)
    assert header.partition_leader_epoch == 4
    assert is_control_batch(batch)
    parsed = parse_control_batch(batch)
    assert parsed is not None
    assert parsed.control_type == control_type
    assert parsed.marker == marker
    assert parsed.header == header
    (record,) = decode_records(batch)
    assert record.timestamp == 123
    assert EndTransactionMarker.from_key_value(record.key, record.value) == marker


def test_a_data_batch_is_not_a_control_batch() -> None:
    batch = build_batch([(b"k", b"v")], timestamp_ms=1, is_transactional=True,
                        producer_id=1, producer_epoch=0, base_sequence=0)
    assert not is_control_batch(batch)
    assert parse_control_batch(batch) is None


def test_an_emptied_control_batch_has_no_marker() -> None:
    full = bytearray(build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 1), 5, 0, timestamp_ms=0))
    # what the cleaner leaves: the header alone with zero records (CRC not needed to parse)
    empty = bytearray(full[:61])
    struct.pack_into(">i", empty, 8, 61 - 12)
    struct.pack_into(">i", empty, 57, 0)
    parsed = parse_control_batch(bytes(empty))
    assert parsed is not None
    assert parsed.control_type is None and parsed.marker is None


def test_parse_is_lenient_about_newer_versions_and_unknown_types() -> None:
    assert parse_control_record_type(bytes.fromhex("0001" "0001")) == ControlRecordType.COMMIT
    assert parse_control_record_type(bytes.fromhex("0000" "0002")) == ControlRecordType.UNKNOWN
    # a newer value version carries the coordinator epoch in the same place
    marker = EndTransactionMarker.from_key_value(ABORT_KEY, bytes.fromhex("0001" "00000009" "ff"))
    assert marker == EndTransactionMarker(ControlRecordType.ABORT, 9)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", bytes.fromhex("ffff" "0001")])
def test_bad_keys_are_invalid_records(key: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        parse_control_record_type(key)


@pytest.mark.parametrize("value", [None, b"", bytes.fromhex("0000" "0000"),
                                   bytes.fromhex("ffff" "00000001")])
def test_bad_values_are_invalid_records(value: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        EndTransactionMarker.from_key_value(COMMIT_KEY, value)


def test_only_commit_and_abort_are_markers() -> None:
    with pytest.raises(ValueError):
        EndTransactionMarker(ControlRecordType.UNKNOWN, 0)
    with pytest.raises(ValueError):
        control_record_key(ControlRecordType.UNKNOWN)
    with pytest.raises(ValueError):
        EndTransactionMarker.from_key_value(bytes.fromhex("0000" "0005"), b"\x00" * 6)
