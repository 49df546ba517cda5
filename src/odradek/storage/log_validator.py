"""The checks of an append before it touches the log (Kafka's LogValidator and
analyzeAndValidateRecords): batch and append sizes, record keys and timestamps for a leader
append (``validate_leader_batches``, from ``Log.append_as_leader``, the one owner of these
checks); complete batches, CRCs and increasing offsets for a follower append, and the runs in
which a follower's fetched batches fit segments.

Records are read only where Kafka must: a client's append to a compacted topic
(``cleanup.policy`` holding ``compact``) needs a key in every record (``validate_record_keys``,
which reads each record's key length and nothing else). The append's origin decides: the
coordinators' own appends (``AppendOrigin.COORDINATOR``) are trusted. Every other leader append
is checked by its batch headers alone."""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol.compression import Codec, decompress
from ..protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    check_batch,
    read_varint,
)
from .append_origin import AppendOrigin
from .errors import (
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from .index import NO_TIMESTAMP
from .log_config import LONG_MAX, LogConfig


def validate_leader_batches(buf: bytes | bytearray | memoryview,
                            headers: Sequence[BatchHeader], config: LogConfig, log_name: str,
                            origin: AppendOrigin) -> bool:
    """Check a leader append's batches (the whole of `buf`) in Kafka's order: each against
    max.message.bytes, then, for a client's append to a compacted topic, every record's key
    (Kafka's LogValidator.validateKey; coordinators' appends are exempt), then the whole
    against segment.bytes. Returns whether any batch has a producer id (an idempotent
    producer). Raises InvalidRecordError (no batch), RecordTooLargeError,
    RecordValidationError (keyless records, with their indexes), RecordBatchTooLargeError."""
    if not headers:
        raise InvalidRecordError("empty record set")
    max_message = config.max_message_bytes
    has_producer = False
    for h in headers:
        if h.size > max_message:
            raise RecordTooLargeError(
                f"batch of {h.size} bytes exceeds max.message.bytes {max_message}")
        if h.producer_id >= 0:
            has_producer = True
    if origin is AppendOrigin.CLIENT and config.compact:
        validate_record_keys(buf, headers, log_name)
    size = len(buf)
    if size > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"message batch size is {size} bytes in append to {log_name}, which exceeds "
            f"the maximum configured segment size of {config.segment_bytes}"
        )
    return has_producer


def check_timestamps(headers: Sequence[BatchHeader], now_ms: int, config: LogConfig,
                     log_name: str) -> None:
    """CreateTime batches must lie within message.timestamp.before/after.max.ms of `now_ms`
    (message.timestamp.difference.max.ms when those are unset); InvalidTimestampError if not."""
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    if before == LONG_MAX:
        before = config.message_timestamp_difference_max_ms
    if after == LONG_MAX:
        after = config.message_timestamp_difference_max_ms
    if before == LONG_MAX and after == LONG_MAX:
        return
    for h in headers:
        if h.max_timestamp - now_ms > after or now_ms - h.base_timestamp > before:
            raise InvalidTimestampError(
                f"timestamp of a batch in {log_name} is out of range "
                f"[now - {before}, now + {after}]"
            )


class RecordValidationError(InvalidRecordError):
    """Kafka's RecordValidationException (KIP-467): records of a batch were refused, so the
    whole append fails with INVALID_RECORD. `record_errors` are (index of the record in its
    batch, why); the exception's message is the response's error_message."""

    def __init__(self, message: str, record_errors: Sequence[tuple[int, str | None]]) -> None:
        super().__init__(message)
        self.record_errors: tuple[tuple[int, str | None], ...] = tuple(record_errors)


RECORDS_REJECTED = "One or more records have been rejected"


def keyless_record_indexes(batch: bytes | bytearray | memoryview, header: BatchHeader
                           ) -> list[int]:
    """The indexes (0-based, within the batch) of the records of a v2 batch without a key
    (key length -1). Only the record length, attributes, the two deltas and the key length of
    each record are read (the batch is decompressed first if it is compressed). Raises
    CorruptRecordError when the records do not fit the batch or disagree with its count."""
    view = memoryview(batch)[header.position + HEADER_SIZE:header.position + header.size]
    data: bytes | memoryview = view
    if header.compression != Codec.NONE:
        data = decompress(header.compression, bytes(view))
    limit = len(data)
    missing: list[int] = []
    pos = 0
    for index in range(header.records_count):
        length, pos = read_varint(data, pos)
        end = pos + length
        if length < 0 or end > limit:
            raise CorruptRecordError(
                f"record {index} runs past the end of its batch at offset {header.base_offset}")
        p = pos + 1  # attributes
        _, p = read_varint(data, p)  # timestamp delta
        _, p = read_varint(data, p)  # offset delta
        key_length, p = read_varint(data, p)
        if p > end:
            raise CorruptRecordError(f"record {index} is shorter than its fields")
        if key_length < 0:
            missing.append(index)
        pos = end
    if pos != limit:
        raise CorruptRecordError(
            f"the batch at offset {header.base_offset} holds more data than its "
            f"{header.records_count} records")
    return missing


def validate_record_keys(buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader],
                         log_name: str) -> None:
    """Kafka's validateKey for a compacted topic: every record needs a key. The first batch
    with keyless records fails the append (RecordValidationError naming each of them, as
    Kafka's processRecordErrors does per batch). Control batches (coordinators' transaction
    markers) are not checked."""
    for h in headers:
        if h.is_control:
            continue
        missing = keyless_record_indexes(buf, h)
        if missing:
            why = (f"Compacted topic cannot accept message without key in topic partition "
                   f"{log_name}.")
            raise RecordValidationError(RECORDS_REJECTED, [(i, why) for i in missing])


def read_follower_batches(view: memoryview) -> tuple[list[BatchHeader], list[int]]:
    """The complete batches of fetched data (CRC checked; a trailing partial batch is
    ignored): their headers and the end position of each in `view`."""
    limit = len(view)
    headers: list[BatchHeader] = []
    ends: list[int] = []
    pos = 0
    while limit - pos >= LOG_OVERHEAD:
        batch_length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if pos + batch_length + LOG_OVERHEAD > limit:
            break  # partial batch at the end of a fetch response
        headers.append(check_batch(view, pos, limit))
        pos += batch_length + LOG_OVERHEAD
        ends.append(pos)
    return headers, ends


def check_follower_offsets(headers: Sequence[BatchHeader], log_end_offset: int,
                           log_name: str) -> tuple[int, int, int]:
    """Fetched batches (at least one) must start at or after `log_end_offset` and have
    increasing offsets. Returns (last offset, max timestamp, offset of the max timestamp).
    Raises UnexpectedAppendOffsetError, InvalidRecordError."""
    first = headers[0].base_offset
    if first < log_end_offset:
        raise UnexpectedAppendOffsetError(
            f"unexpected offset in append to {log_name}: first offset {first} is less than "
            f"the next offset {log_end_offset}", first, headers[-1].last_offset
        )
    prev = log_end_offset - 1
    max_ts, shallow = NO_TIMESTAMP, first
    for h in headers:
        if h.base_offset <= prev or h.last_offset_delta < 0:
            raise InvalidRecordError(f"out of order offsets in append to {log_name}")
        prev = h.last_offset
        if h.max_timestamp > max_ts:
            max_ts, shallow = h.max_timestamp, h.last_offset
    return prev, max_ts, shallow


def follower_append_runs(ends: list[int], segment_bytes: int) -> list[tuple[int, int]]:
    """Split batches (given by their end positions in one buffer) into consecutive runs
    [lo, hi) whose total size is at most `segment_bytes`; a batch larger than that forms a run
    of its own. Every batch is in exactly one run, in order."""
    runs: list[tuple[int, int]] = []
    lo, start = 0, 0
    for i, end in enumerate(ends):
        if i > lo and end - start > segment_bytes:
            runs.append((lo, i))
            lo, start = i, ends[i - 1]
    if ends:
        runs.append((lo, len(ends)))
    return runs


__all__ = [
    "RECORDS_REJECTED",
    "RecordValidationError",
    "check_follower_offsets",
    "check_timestamps",
    "follower_append_runs",
    "keyless_record_indexes",
    "read_follower_batches",
    "validate_leader_batches",
    "validate_record_keys",
]
