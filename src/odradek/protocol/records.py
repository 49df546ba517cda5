"""Kafka record batches, magic v2 (S-1.2), as the broker's hot path sees them: opaque blobs.

The broker validates a batch by its 61-byte header and its CRC32C and patches the base offset and
the partition leader epoch (both outside the CRC) in place. Individual records are parsed only by
the dump tool, the compactor, the client and tests (`decode_records`, `build_batch`).

Batch header layout (big-endian), offsets in bytes:
  0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32 |
  21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64 |
  43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records
The CRC covers attributes through the end of the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from ..common.clock import now_ms
from .compression import Codec, compress, decompress

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CRC_START = 21
MAGIC_OFFSET = 16

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_U = struct.Struct(">I")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


class InvalidRecordError(ValueError):
    """A batch that is well-formed enough to read but breaks a rule (Kafka's INVALID_RECORD)."""


class CorruptRecordError(ValueError):
    """A batch whose bytes are damaged: bad size, truncated, CRC mismatch (CORRUPT_MESSAGE)."""


@dataclass(slots=True, frozen=True)
class BatchHeader:
    """The fixed 61-byte header of one v2 record batch, located at `position` in a buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Codec:
        return Codec(self.attributes & COMPRESSION_MASK)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Read the header at `position`; raises CorruptRecordError when fewer than 61 bytes remain."""
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header truncated: {len(buf) - position} bytes at position {position}"
        )
    return BatchHeader(*_HEADER.unpack_from(buf, position), position=position)


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    return crc32c(memoryview(buf)[position + CRC_START:position + size])


def check_batch(buf: bytes | bytearray | memoryview, position: int, limit: int) -> BatchHeader:
    """Check one batch in buf[position:limit]: size, magic, CRC. Raises CorruptRecordError."""
    if limit - position < LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch truncated at position {position}")
    _, batch_length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {batch_length} below the minimum")
    size = batch_length + LOG_OVERHEAD
    if position + size > limit:
        raise CorruptRecordError(
            f"record batch of {size} bytes at position {position} runs past the end ({limit})"
        )
    header = read_header(buf, position)
    if header.magic != 2:
        raise InvalidRecordError(f"record batch magic {header.magic} is not supported (only 2)")
    if compute_crc(buf, position, size) != header.crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch at position {position} (stored {header.crc:#010x})"
        )
    return header


def validate_batches(buf: bytes | bytearray | memoryview, *,
                     allow_control: bool = False) -> list[BatchHeader]:
    """Validate the record set of one partition of a Produce request (Kafka's LogValidator,
    header level only). Control batches are refused unless `allow_control` (the broker's own
    coordinators write transaction markers). Raises CorruptRecordError / InvalidRecordError."""
    headers: list[BatchHeader] = []
    position, limit = 0, len(buf)
    if limit == 0:
        raise InvalidRecordError("empty record set")
    while position < limit:
        header = check_batch(buf, position, limit)
        if header.records_count <= 0:
            raise InvalidRecordError("record batch has no records")
        if header.last_offset_delta != header.records_count - 1:
            raise InvalidRecordError(
                f"record batch lastOffsetDelta {header.last_offset_delta} does not match "
                f"its {header.records_count} records"
            )
        if header.is_control and not allow_control:
            raise InvalidRecordError("clients are not allowed to write control records")
        headers.append(header)
        position += header.size
    return headers


def scan_valid_prefix(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> Iterator[BatchHeader]:
    """Yield well-formed batches from position on and stop silently at the first bad one
    (log recovery: the caller truncates at the end of the last batch yielded)."""
    limit = len(buf)
    while position < limit:
        try:
            header = check_batch(buf, position, limit)
        except (CorruptRecordError, InvalidRecordError):
            return
        yield header
        position += header.size


def iter_headers(buf: bytes | bytearray | memoryview, position: int = 0) -> Iterator[BatchHeader]:
    """Yield batch headers without checking CRCs (data already validated, e.g. from the log).
    A trailing partial batch (a fetch cut at max bytes) is not yielded."""
    limit = len(buf)
    while limit - position >= HEADER_SIZE:
        header = read_header(buf, position)
        if position + header.size > limit or header.batch_length < MIN_BATCH_LENGTH:
            return
        yield header
        position += header.size


def assign_offsets(
    buf: bytearray, header: BatchHeader, base_offset: int, leader_epoch: int
) -> None:
    """Patch base offset and partition leader epoch in place (outside the CRC: no recompute)."""
    _Q.pack_into(buf, header.position, base_offset)
    _I.pack_into(buf, header.position + 12, leader_epoch)


def set_log_append_time(buf: bytearray, header: BatchHeader, timestamp_ms: int) -> None:
    """message.timestamp.type=LogAppendTime: stamp the batch's max timestamp and timestamp type
    bit, then recompute the CRC (Kafka's DefaultRecordBatch.setMaxTimestamp)."""
    pos = header.position
    struct.pack_into(">h", buf, pos + 21, header.attributes | TIMESTAMP_TYPE_MASK)
    _Q.pack_into(buf, pos + 35, timestamp_ms)
    _U.pack_into(buf, pos + 17, compute_crc(buf, pos, header.size))


# ---------------------------------------------------------------------------------------------
# Individual records: for tools, the compactor, the client and tests. Never on the hot path.
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    # One and two bytes first: offset and timestamp deltas, key and value lengths below 8 KiB.
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        b2 = buf[pos + 1]
    except IndexError:
        raise CorruptRecordError("varint runs past the end of the record") from None
    if b2 < 0x80:
        v = (b & 0x7F) | (b2 << 7)
        return (v >> 1) ^ -(v & 1), pos + 2
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecordError("record field runs past the end of the record")
    return buf[pos:pos + length], pos + length


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray(b"\x00")  # record attributes (unused)
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for item in (key, value):
        if item is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(item))
            body += item
    write_varint(body, len(headers))
    for hkey, hvalue in headers:
        kb = hkey.encode()
        write_varint(body, len(kb))
        body += kb
        if hvalue is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hvalue))
            body += hvalue
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode every record of one batch (decompressing if needed)."""
    header = read_header(batch, 0)
    data = bytes(memoryview(batch)[HEADER_SIZE:header.size])
    if header.compression != Codec.NONE:
        data = decompress(header.compression, data)
    records: list[Record] = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(data, pos)
        end = pos + length
        if end > len(data):
            raise CorruptRecordError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(data, pos)
        off_delta, pos = read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        nheaders, pos = read_varint(data, pos)
        hdrs: list[tuple[str, bytes | None]] = []
        for _ in range(nheaders):
            hk, pos = _read_bytes(data, pos)
            hv, pos = _read_bytes(data, pos)
            hdrs.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        timestamp = (header.max_timestamp if header.is_log_append_time
                     else header.base_timestamp + ts_delta)
        records.append(Record(header.base_offset + off_delta, timestamp, key, value, hdrs))
    return records


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None] | Record],
    *,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    compression: int = Codec.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Build one v2 batch from (key, value) pairs or Records (whose timestamps/headers are kept)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    now = now_ms() if timestamp_ms is None else timestamp_ms
    stamps = [r.timestamp if isinstance(r, Record) else now for r in records]
    base_ts = stamps[0]
    body = bytearray()
    for i, r in enumerate(records):
        if isinstance(r, Record):
            body += encode_record(i, stamps[i] - base_ts, r.key, r.value, r.headers)
        else:
            body += encode_record(i, stamps[i] - base_ts, r[0], r[1])
    payload = compress(compression, bytes(body))
    attributes = int(compression) & COMPRESSION_MASK
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    batch = bytearray(_HEADER.pack(
        base_offset, MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, 2, 0, attributes,
        len(records) - 1, base_ts, max(stamps), producer_id, producer_epoch, base_sequence,
        len(records),
    ))
    batch += payload
    _U.pack_into(batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)
