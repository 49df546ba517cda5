"""Record batch v2 (odradek.protocol.records): building and decoding, the CRC32C, header-level
validation of produced data, log-recovery scanning, in-place patching and varints.

The golden test builds a batch byte by byte from Kafka's documented layout
(https://kafka.apache.org/documentation/#recordbatch) with an independent CRC32C.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import Codec
from odradek.protocol.records import (
    CONTROL_MASK,
    HEADER_SIZE,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    assign_offsets,
    build_batch,
    decode_records,
    iter_headers,
    read_header,
    read_varint,
    scan_valid_prefix,
    set_log_append_time,
    validate_batches,
    write_varint,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies ---------------------------------------------------------------------------------

blobs = st.none() | st.binary(max_size=64)
header_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
headers = st.lists(st.tuples(header_keys, blobs), max_size=3)
timestamps = st.integers(min_value=0, max_value=2**42)
records_st = st.lists(
    st.builds(Record, offset=st.just(0), timestamp=timestamps, key=blobs, value=blobs,
              headers=headers),
    min_size=1, max_size=8,
)
codecs = st.sampled_from(list(Codec))


def simple_batch(n: int = 3, base_offset: int = 0, ts: int = 1_000, **kw: object) -> bytes:
    recs = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(n)]
    return build_batch(recs, base_offset=base_offset, timestamp_ms=ts, **kw)  # type: ignore[arg-type]


def recrc(batch: bytearray) -> None:
    """Recompute the CRC of a hand-modified batch (independent implementation)."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


# --- golden bytes -------------------------------------------------------------------------------


def test_build_batch_matches_kafka_documented_layout() -> None:
    base_ts = 1_700_000_000_000
    records = [
        Record(0, base_ts, b"key", b"value", [("h", b"v")]),
        Record(1, base_ts + 5, None, b"", []),
        Record(2, base_ts - 1, b"k2", None, [("n", None)]),
    ]
    # Records: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    # keyLength varint, key, valueLen varint, value, header count varint, headers
    # (headerKeyLength varint, headerKey, headerValueLength varint, value). Zigzag varints:
    # 0 -> 00, 1 -> 02, -1 -> 01, 2 -> 04, 3 -> 06, 5 -> 0a.
    r0 = (b"\x00" + b"\x00" + b"\x00" + b"\x06key" + b"\x0avalue"
          + b"\x02" + b"\x02h" + b"\x02v")
    r1 = b"\x00" + b"\x0a" + b"\x02" + b"\x01" + b"\x00" + b"\x00"
    r2 = b"\x00" + b"\x01" + b"\x04" + b"\x04k2" + b"\x01" + b"\x02" + b"\x02n" + b"\x01"
    assert (len(r0), len(r1), len(r2)) == (18, 6, 11)
    body = b"\x24" + r0 + b"\x0c" + r1 + b"\x16" + r2

    attributes = 0x10  # transactional, CreateTime, no compression
    after_crc = (
        struct.pack(">h", attributes)
        + struct.pack(">i", 2)  # lastOffsetDelta
        + struct.pack(">q", base_ts)  # baseTimestamp (first record's)
        + struct.pack(">q", base_ts + 5)  # maxTimestamp
        + struct.pack(">q", 1234)  # producerId
        + struct.pack(">h", 3)  # producerEpoch
        + struct.pack(">i", 10)  # baseSequence
        + struct.pack(">i", 3)  # records count
        + body
    )
    batch_length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch + magic + crc + rest
    expected = (
        struct.pack(">q", 42)
        + struct.pack(">i", batch_length)
        + struct.pack(">i", 7)
        + struct.pack(">b", 2)
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )

    built = build_batch(
        records, base_offset=42, partition_leader_epoch=7, producer_id=1234, producer_epoch=3,
        base_sequence=10, is_transactional=True,
    )
    assert built == expected

    header = read_header(built)
    assert (header.base_offset, header.last_offset, header.records_count) == (42, 44, 3)
    assert header.is_transactional and not header.is_control and not header.is_log_append_time
    assert header.last_sequence == 12
    decoded = decode_records(built)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (42, base_ts, b"key", b"value", [("h", b"v")]),
        (43, base_ts + 5, None, b"", []),
        (44, base_ts - 1, b"k2", None, [("n", None)]),
    ]


# --- round trips --------------------------------------------------------------------------------


@FAST
@given(records=records_st, codec=codecs, base_offset=st.integers(0, 2**40),
       epoch=st.integers(-1, 2**31 - 1))
def test_build_decode_round_trip(records: list[Record], codec: Codec, base_offset: int,
                                 epoch: int) -> None:
    batch = build_batch(records, base_offset=base_offset, compression=codec,
                        partition_leader_epoch=epoch)
    [header] = validate_batches(batch)
    assert header.size == len(batch)
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.partition_leader_epoch == epoch
    decoded = decode_records(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, r.timestamp, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    ]


def test_build_from_pairs_uses_one_timestamp_and_keeps_nulls() -> None:
    batch = build_batch([(None, None), (b"", b""), (b"k", None)], timestamp_ms=99)
    decoded = decode_records(batch)
    assert [(r.key, r.value, r.timestamp, r.offset) for r in decoded] == [
        (None, None, 99, 0), (b"", b"", 99, 1), (b"k", None, 99, 2)]


def test_build_batch_rejects_no_records() -> None:
    with pytest.raises(ValueError):
        build_batch([])


# --- CRC ----------------------------------------------------------------------------------------


@FAST
@given(data=st.data(), codec=codecs)
def test_crc_detects_any_single_byte_change(data: st.DataObject, codec: Codec) -> None:
    batch = bytearray(simple_batch(4, compression=codec))
    # The CRC field itself and every byte it covers (attributes to the end).
    pos = data.draw(st.integers(17, len(batch) - 1), label="pos")
    flip = data.draw(st.integers(1, 255), label="xor")
    batch[pos] ^= flip
    with pytest.raises(CorruptRecordError):
        validate_batches(batch)
    assert list(scan_valid_prefix(batch)) == []


@FAST
@given(data=st.data())
def test_bytes_outside_crc_are_base_offset_and_leader_epoch(data: st.DataObject) -> None:
    batch = bytearray(simple_batch(2))
    pos = data.draw(st.sampled_from([*range(0, 8), *range(12, 16)]), label="pos")
    batch[pos] ^= data.draw(st.integers(1, 255), label="xor")
    [header] = validate_batches(batch)  # still valid: these bytes are not covered
    assert header.size == len(batch)


# --- validate_batches rejections ----------------------------------------------------------------


def _with(batch: bytes, fmt: str, offset: int, value: int, crc: bool = True) -> bytearray:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    if crc:
        recrc(out)
    return out


GOOD = simple_batch(3)


@pytest.mark.parametrize(
    ("buf", "error"),
    [
        pytest.param(GOOD[:-1], CorruptRecordError, id="truncated-last-byte"),
        pytest.param(GOOD[:40], CorruptRecordError, id="truncated-in-header"),
        pytest.param(GOOD[:11], CorruptRecordError, id="truncated-before-length"),
        pytest.param(GOOD + GOOD[:20], CorruptRecordError, id="second-batch-truncated"),
        pytest.param(_with(GOOD, ">i", 8, 48, crc=False), CorruptRecordError,
                     id="length-below-minimum"),
        pytest.param(_with(GOOD, ">i", 8, -5, crc=False), CorruptRecordError,
                     id="negative-length"),
        pytest.param(_with(GOOD, ">i", 8, len(GOOD) - 12 + 1, crc=False), CorruptRecordError,
                     id="length-past-end"),
        pytest.param(_with(GOOD, ">I", 17, read_header(GOOD).crc ^ 1, crc=False),
                     CorruptRecordError, id="crc-mismatch"),
        pytest.param(_with(GOOD, ">b", 16, 1, crc=False), InvalidRecordError, id="magic-1"),
        pytest.param(_with(GOOD, ">b", 16, 3, crc=False), InvalidRecordError, id="magic-3"),
        pytest.param(_with(_with(GOOD, ">i", 57, 0), ">i", 23, -1), InvalidRecordError,
                     id="count-zero"),
        pytest.param(_with(GOOD, ">i", 23, 5), InvalidRecordError, id="last-offset-delta"),
        pytest.param(_with(GOOD, ">i", 57, 2), InvalidRecordError, id="count-vs-delta"),
        pytest.param(simple_batch(2, is_control=True), InvalidRecordError, id="control"),
        pytest.param(GOOD + simple_batch(1, is_control=True), InvalidRecordError,
                     id="second-batch-control"),
        pytest.param(b"", InvalidRecordError, id="empty"),
    ],
)
def test_validate_batches_rejects(buf: bytes, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        validate_batches(buf)
    assert type(info.value) is error


def test_control_bit_is_what_makes_a_control_batch() -> None:
    ctrl = bytearray(GOOD)
    struct.pack_into(">h", ctrl, 21, read_header(GOOD).attributes | CONTROL_MASK)
    recrc(ctrl)
    with pytest.raises(InvalidRecordError):
        validate_batches(ctrl)


def test_validate_batches_accepts_several_batches_and_views() -> None:
    a, b = simple_batch(3, base_offset=0), simple_batch(1, base_offset=3, compression=Codec.GZIP)
    for buf in (a + b, bytearray(a + b), memoryview(a + b)):
        headers = validate_batches(buf)
        assert [(h.position, h.size, h.records_count) for h in headers] == [
            (0, len(a), 3), (len(a), len(b), 1)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_validate_batches_on_garbage_raises_only_record_errors(buf: bytes) -> None:
    with contextlib.suppress(CorruptRecordError, InvalidRecordError):
        validate_batches(buf)


@FAST
@given(data=st.data())
def test_validate_batches_on_mutated_headers_raises_only_record_errors(
        data: st.DataObject) -> None:
    """Random header fields with the CRC made valid again: reaches the rule checks."""
    batch = bytearray(simple_batch(data.draw(st.integers(1, 4), label="n")))
    for fmt, off in ((">i", 8), (">b", 16), (">h", 21), (">i", 23), (">i", 57)):
        if data.draw(st.booleans()):
            bits = struct.calcsize(fmt) * 8
            struct.pack_into(fmt, batch, off,
                             data.draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)))
    if data.draw(st.booleans()):
        recrc(batch)
    cut = data.draw(st.integers(0, len(batch)), label="cut")
    with contextlib.suppress(CorruptRecordError, InvalidRecordError):
        validate_batches(batch[:cut])


# --- scan_valid_prefix / iter_headers -----------------------------------------------------------


def _batches(sizes: list[int]) -> list[bytes]:
    out, offset = [], 0
    for n in sizes:
        out.append(simple_batch(n, base_offset=offset, ts=1000 + offset))
        offset += n
    return out


@FAST
@given(sizes=st.lists(st.integers(1, 4), max_size=5), tail=st.data())
def test_scan_valid_prefix_stops_at_garbage_or_truncation(sizes: list[int],
                                                          tail: st.DataObject) -> None:
    good = _batches(sizes)
    kind = tail.draw(st.sampled_from(["garbage", "truncated", "corrupt", "none"]), label="kind")
    extra = simple_batch(2, base_offset=100)
    if kind == "garbage":
        suffix = tail.draw(st.binary(min_size=1, max_size=100), label="garbage")
    elif kind == "truncated":
        suffix = extra[:tail.draw(st.integers(1, len(extra) - 1), label="cut")]
    elif kind == "corrupt":
        broken = bytearray(extra)
        broken[tail.draw(st.integers(21, len(extra) - 1), label="pos")] ^= 0xFF
        suffix = bytes(broken) + simple_batch(1, base_offset=102)  # good data after: not used
    else:
        suffix = b""
    buf = b"".join(good) + suffix
    headers = list(scan_valid_prefix(buf))
    positions = [sum(len(b) for b in good[:i]) for i in range(len(good))]
    assert [(h.position, h.size) for h in headers] == [
        (p, len(b)) for p, b in zip(positions, good, strict=True)]
    assert [h.base_offset for h in headers] == [read_header(b).base_offset for b in good]


def test_scan_valid_prefix_from_a_position() -> None:
    a, b = _batches([2, 3])
    assert [h.position for h in scan_valid_prefix(a + b, len(a))] == [len(a)]
    assert list(scan_valid_prefix(a + b, len(a) + len(b))) == []


def test_scan_valid_prefix_stops_at_wrong_magic() -> None:
    a, b = _batches([1, 1])
    bad = _with(b, ">b", 16, 1, crc=False)
    assert [h.position for h in scan_valid_prefix(a + bad)] == [0]


def test_iter_headers_skips_trailing_partial_batch_without_crc_check() -> None:
    a, b, c = _batches([1, 2, 3])
    corrupt_b = bytearray(b)
    corrupt_b[-1] ^= 0xFF  # iter_headers does not check CRCs
    buf = a + bytes(corrupt_b) + c[:-1]
    assert [(h.position, h.records_count) for h in iter_headers(buf)] == [
        (0, 1), (len(a), 2)]
    assert list(iter_headers(a[:HEADER_SIZE - 1])) == []


# --- in-place patching --------------------------------------------------------------------------


@FAST
@given(codec=codecs, base_offset=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
def test_assign_offsets_keeps_crc_valid(codec: Codec, base_offset: int, epoch: int) -> None:
    a, b = simple_batch(2, compression=codec), simple_batch(3)
    buf = bytearray(a + b)
    headers = validate_batches(buf)
    assign_offsets(buf, headers[0], base_offset, epoch)
    assign_offsets(buf, headers[1], base_offset + 2, epoch)
    after = validate_batches(buf)
    assert [(h.base_offset, h.partition_leader_epoch) for h in after] == [
        (base_offset, epoch), (base_offset + 2, epoch)]
    assert [r.offset for r in decode_records(buf[:len(a)])] == [base_offset, base_offset + 1]
    assert bytes(buf[16:len(a)]) == a[16:]  # nothing else changed


@FAST
@given(codec=codecs, ts=st.integers(0, 2**50), n=st.integers(1, 4))
def test_set_log_append_time(codec: Codec, ts: int, n: int) -> None:
    first = simple_batch(1, base_offset=0)
    buf = bytearray(first + simple_batch(n, base_offset=1, compression=codec,
                                         producer_id=5, producer_epoch=1, base_sequence=0))
    second = validate_batches(buf)[1]
    assert not second.is_log_append_time
    set_log_append_time(buf, second, ts)
    h = validate_batches(buf)[1]  # CRC recomputed
    assert h.is_log_append_time
    assert h.max_timestamp == ts
    assert h.compression == codec and h.producer_id == 5
    assert buf[:len(first)] == first  # only that batch touched
    decoded = decode_records(buf[h.position:])
    assert [r.timestamp for r in decoded] == [ts] * n


def test_log_append_time_batch_built_directly_reports_max_timestamp() -> None:
    batch = build_batch([Record(0, 10, None, b"a"), Record(0, 30, None, b"b")],
                        log_append_time=True)
    assert [r.timestamp for r in decode_records(batch)] == [30, 30]


# --- varints ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (300, b"\xd8\x04"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f"),
     (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(2**63), b"\xff" * 9 + b"\x01")],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert bytes(out) == encoded
    assert read_varint(b"\xaa" + encoded + b"\x00", 1) == (value, 1 + len(encoded))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(value: int) -> None:
    out = bytearray()
    write_varint(out, value)
    assert len(out) <= 10
    assert read_varint(bytes(out), 0) == (value, len(out))


def test_varint_truncated_or_too_long() -> None:
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError):
        read_varint(b"", 0)
    with pytest.raises(CorruptRecordError):
        read_varint(b"\xff" * 11, 0)


def test_decode_records_detects_record_length_mismatch() -> None:
    batch = bytearray(build_batch([(b"k", b"v")], timestamp_ms=0))
    # The record length varint is the first byte of the records: zigzag(8) for attributes,
    # timestampDelta, offsetDelta, keyLength, key, valueLen, value, header count.
    assert batch[HEADER_SIZE] == 2 * 8
    for wrong in (7, 9):
        batch[HEADER_SIZE] = 2 * wrong
        with pytest.raises(CorruptRecordError):
            decode_records(batch)


@FAST
@given(st.binary(max_size=64))
def test_decode_records_of_garbage_body_raises_only_corrupt(body: bytes) -> None:
    garbage = bytearray(simple_batch(2)[:HEADER_SIZE]) + body
    struct.pack_into(">i", garbage, 8, len(garbage) - 12)
    with contextlib.suppress(CorruptRecordError):
        decode_records(garbage)
