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


class ProducerStateError(StorageError):
    """A batch the producer state rejects (Kafka's ProducerStateManager validation)."""


class OutOfOrderSequenceError(ProducerStateError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45)."""

    error_code = 45


class InvalidProducerEpochError(ProducerStateError):
    """INVALID_PRODUCER_EPOCH (47): the batch's producer epoch is older than the known one."""

    error_code = 47


class UnknownProducerIdError(OutOfOrderSequenceError):
    """UNKNOWN_PRODUCER_ID (59), only with strict_unknown_producer (Kafka 2.0-2.4)."""

    error_code = 59


__all__ = [
    "InvalidProducerEpochError",
    "InvalidTimestampError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerStateError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
]
