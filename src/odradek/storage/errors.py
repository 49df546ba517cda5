"""The storage layer's errors, each with the Kafka error code the API layer answers."""

from __future__ import annotations


class StorageError(Exception):
    error_code = -1


class OffsetOutOfRangeError(StorageError):
    """OFFSET_OUT_OF_RANGE (1): fetch offset outside [log start offset, log end offset]."""

    error_code = 1


class RecordTooLargeError(StorageError):
    """MESSAGE_TOO_LARGE (10): a batch larger than max.message.bytes."""

    error_code = 10


class RecordBatchTooLargeError(StorageError):
    """RECORD_LIST_TOO_LARGE (18): an append larger than segment.bytes."""

    error_code = 18


class InvalidTimestampError(StorageError):
    """INVALID_TIMESTAMP (32): outside message.timestamp.before/after.max.ms."""

    error_code = 32


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose first offset is below the log end offset."""

    error_code = 2  # reported as CORRUPT_MESSAGE, as Kafka's follower treats it


__all__ = [
    "InvalidTimestampError",
    "OffsetOutOfRangeError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
]
