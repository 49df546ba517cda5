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
    """A follower append whose first offset is below the log end offset (Kafka's
    UnexpectedAppendOffsetException): `first_offset` is the first batch's base offset,
    `last_offset` the append's last offset."""

    error_code = 2  # reported as CORRUPT_MESSAGE, as Kafka's follower treats it

    def __init__(self, message: str, first_offset: int = -1, last_offset: int = -1) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class KafkaStorageError(StorageError):
    """KAFKA_STORAGE_ERROR (56): the partition's log directory is offline (an I/O error or a
    full disk in it, KIP-112)."""

    error_code = 56


class ProducerStateError(StorageError):
    """A batch the producer state rejects (Kafka's ProducerStateManager validation)."""


class OutOfOrderSequenceError(ProducerStateError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45)."""

    error_code = 45


class InvalidProducerEpochError(ProducerStateError):
    """INVALID_PRODUCER_EPOCH (47): the batch's producer epoch is older than the known one."""

    error_code = 47


class InvalidTxnStateError(ProducerStateError):
    """INVALID_TXN_STATE (48): a non-transactional batch from a producer whose transaction is
    ongoing on this partition (Kafka's InvalidTxnStateException)."""

    error_code = 48


class TransactionCoordinatorFencedError(ProducerStateError):
    """TRANSACTION_COORDINATOR_FENCED (52): a transaction marker written by a coordinator whose
    epoch is older than the one this partition saw for the producer."""

    error_code = 52


class UnknownProducerIdError(OutOfOrderSequenceError):
    """UNKNOWN_PRODUCER_ID (59), only with strict_unknown_producer (Kafka 2.0-2.4)."""

    error_code = 59


__all__ = [
    "InvalidProducerEpochError",
    "InvalidTimestampError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerStateError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
]
