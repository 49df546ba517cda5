"""What the replica manager answers per partition, and the error code of each failure.

The result types of an append (Kafka's LogAppendResult / PartitionResponse), a read (its
FetchPartitionData), a DeleteRecords (DeleteRecordsPartitionStatus) and a DescribeLogDirs, the
fetch request's per-partition fields and isolation levels (KIP-98), where a fetch stops
(``fetch_limit``, Kafka's FetchIsolation), and ``error_code_for``: the exception raised by a
partition or its log turned into the Kafka error code answered (Kafka's Errors.forException).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.records import CorruptRecordError, InvalidRecordError
from ...storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from .partition import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    Partition,
    UnknownLeaderEpochError,
)
from .replica_selector import NO_PREFERRED_REPLICA

READ_UNCOMMITTED = 0  # Fetch / ListOffsets isolation levels (KIP-98)
READ_COMMITTED = 1


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    # KIP-467 (Produce v8+): (batch index, message) of the records that failed the batch
    record_errors: tuple[tuple[int, str | None], ...] = ()


@dataclass(slots=True)
class FetchRequestPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1  # Fetch v12+ (KIP-320): -1 when the fetcher has none
    topic_id: uuid.UUID | None = None  # Fetch v13+ (KIP-516): the id the request named


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    regions: list[Any] = field(default_factory=list)
    size: int = 0
    leader_end_offset: int = -1  # the leader's LEO when the data was read
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions in the data;
    # None (null in the response) for read_uncommitted and followers, as Kafka
    aborted_transactions: list[tuple[int, int]] | None = None
    # KIP-392: the follower this consumer should fetch the partition from (no data then)
    preferred_read_replica: int = NO_PREFERRED_REPLICA
    # KIP-320: (epoch, end offset) where the fetcher's log diverges from ours (no data then)
    diverging_epoch: tuple[int, int] | None = None


@dataclass(slots=True)
class DeleteRecordsResult:
    """One partition of a DeleteRecords answer (Kafka's DeleteRecordsPartitionStatus)."""

    error: ErrorCode = ErrorCode.none
    low_watermark: int = -1
    requested_offset: int = -1


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    """One partition of a DescribeLogDirs result."""

    index: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of a DescribeLogDirs result: topic -> its partitions here."""

    log_dir: str
    error: ErrorCode
    topics: dict[str, list[LogDirPartition]]


def fetch_limit(partition: Partition, replica_id: int, isolation_level: int) -> int:
    """Where a fetch stops (Kafka's FetchIsolation): the LEO for followers, the last stable
    offset for read_committed consumers, the high watermark for the others."""
    if replica_id >= 0:
        return partition.log_end_offset
    if isolation_level == READ_COMMITTED:
        return partition.last_stable_offset
    return partition.high_watermark


# In order: the first class the exception is an instance of decides.
_ERRORS: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (NotLeaderError, ErrorCode.not_leader_or_follower),
    (NotEnoughReplicasError, ErrorCode.not_enough_replicas),
    (FencedLeaderEpochError, ErrorCode.fenced_leader_epoch),
    (UnknownLeaderEpochError, ErrorCode.unknown_leader_epoch),
    (CorruptRecordError, ErrorCode.corrupt_message),
    (InvalidRecordError, ErrorCode.invalid_record),
    (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (TransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
)


def error_code_for(exc: Exception) -> ErrorCode:
    """The error code answered for `exc` (Kafka's Errors.forException): the replication and
    record errors by class, then a storage error's own `error_code`, else
    UNKNOWN_SERVER_ERROR."""
    for cls, code in _ERRORS:
        if isinstance(exc, cls):
            return code
    code = getattr(exc, "error_code", None)  # storage errors carry Kafka's code
    if isinstance(code, int) and code > 0:
        return ErrorCode(code)
    return ErrorCode.unknown_server_error


#: Errors Kafka's appendToLocalLog and readFromLocalLog answer without marking the failed
#: produce / fetch meters (a client's stale metadata, a retry, a deleted topic).
EXPECTED_ERRORS = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.offset_out_of_range, ErrorCode.message_too_large,
    ErrorCode.record_list_too_large, ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error})


__all__ = [
    "EXPECTED_ERRORS",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "DeleteRecordsResult",
    "FetchRequestPartition",
    "FetchResult",
    "LogDirDescription",
    "LogDirPartition",
    "ProduceResult",
    "error_code_for",
    "fetch_limit",
]
