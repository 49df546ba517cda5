"""The checks of an append before it touches the log (Kafka's LogValidator and the
follower's analyzeAndValidateRecords): batch and append sizes and timestamps for a leader
append; complete batches, CRCs and increasing offsets for a follower append, and the runs in
which a follower's fetched batches fit segments."""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol.records import LOG_OVERHEAD, BatchHeader, InvalidRecordError, check_batch
from .errors import (
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from .index import NO_TIMESTAMP
from .log_config import LONG_MAX, LogConfig


def validate_leader_batches(headers: Sequence[BatchHeader], size: int, config: LogConfig,
                            log_name: str) -> bool:
    """Check a produce request's batches (`size` bytes in all) against max.message.bytes and
    segment.bytes; returns whether any batch has a producer id (an idempotent producer).
    Raises InvalidRecordError (no batch), RecordTooLargeError, RecordBatchTooLargeError."""
    if not headers:
        raise InvalidRecordError("empty record set")
    max_message = config.max_message_bytes
    has_producer = False
    for h in headers:
        if h.size > max_message:
            raise RecordTooLargeError(
                f"message batch size is {h.size} bytes in append to {log_name}, which "
                f"exceeds the maximum configured size of {max_message}"
            )
        if h.producer_id >= 0:
            has_producer = True
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
            f"the next offset {log_end_offset}"
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
    "check_follower_offsets",
    "check_timestamps",
    "follower_append_runs",
    "read_follower_batches",
    "validate_leader_batches",
]
