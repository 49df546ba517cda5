"""Idempotent-producer state of one partition (Kafka's ProducerStateManager / ProducerAppendInfo,
KIP-98), kept from batch headers only.

Per producer id: its epoch and the metadata of its last 5 batches (first/last sequence,
first/last offset, max timestamp). A client's batch is
* a duplicate when its epoch equals the producer's and its sequence range equals one of the
  5 cached batches: the broker answers with the ORIGINAL offsets and writes nothing;
* rejected with ``InvalidProducerEpochError`` when its epoch is older than the producer's;
* rejected with ``OutOfOrderSequenceError`` when a new epoch does not start at sequence 0, or
  when, in the same epoch, its first sequence is not last sequence + 1 (sequences wrap from
  Int.MAX to 0).
A producer id the partition does not know (or only knows from a snapshot without batches) is
accepted at any sequence, as Kafka does since 2.5 (KIP-360); pass
``strict_unknown_producer=True`` for the 2.0-2.4 rule, which rejects a first sequence other
than 0 with ``UnknownProducerIdError``.

Replicated and recovered batches are taken as they are (only the epoch moves forward).

Transactions (KIP-98, Kafka's ``ProducerAppendInfo`` rules): a transactional data batch starts
the producer's transaction when none is ongoing (``current_txn_first_offset``); a
non-transactional batch while one is ongoing is refused with ``InvalidTxnStateError``. A COMMIT
or ABORT marker (the control batch's first record, read by the log) with an older producer epoch
is refused with ``InvalidProducerEpochError``, one with a coordinator epoch older than the
producer's with ``TransactionCoordinatorFencedError``; otherwise it ends the transaction
(``transaction_state.complete_transaction``), which stays *unreplicated* until the high watermark
passes the marker. The first unstable offset is the smallest first offset of an ongoing or
unreplicated transaction. A replicated or recovered batch is never refused. The origin of an
append (``AppendOrigin``) decides the checks: CLIENT epoch, sequence and duplicates; COORDINATOR
epoch only; REPLICATION none.

State survives restarts through Kafka's ``<20-digit offset>.snapshot`` files (version 1: int16
version, uint32 CRC32C of the rest, int32 count, then per producer: id i64, epoch i16,
last sequence i32, last offset i64, offset delta i32, timestamp i64, coordinator epoch i32,
current transaction first offset i64). As in Kafka, a snapshot keeps only each producer's last
batch; the log rebuilds the rest by scanning batch headers after the snapshot's offset.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from ..common import file_system
from ..protocol.control_records import EndTransactionMarker
from ..protocol.records import BatchHeader
from .append_origin import AppendOrigin
from .checkpoints import write_atomically
from .errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from .log_config import INT_MAX
from .transaction_state import (
    CompletedTxn,
    TxnCompletion,
    complete_transaction,
)
from .transaction_state import (
    first_unstable_offset as lowest_unstable_offset,
)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_SNAP_HEAD = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(ValueError):
    pass


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence (sequences wrap at Int.MAX)."""
    if sequence < decrement:
        return INT_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT_MAX)


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True, frozen=True)
class DuplicateBatch:
    """A retried batch already in the log: answer with these original offsets."""

    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.last_seq == last and batch.first_seq == first:
                return batch
        return None


@dataclass(slots=True, frozen=True)
class _Pending:
    """A producer's state as seen by the validation of one append, batch after batch."""

    epoch: int = NO_PRODUCER_EPOCH
    last_seq: int = NO_SEQUENCE
    in_txn: bool = False
    coordinator_epoch: int = -1


class ProducerStateManager:
    """Producer id -> ProducerStateEntry for one partition, plus its snapshot files."""

    def __init__(self, partition_dir: Path | None = None, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 strict_unknown_producer: bool = False) -> None:
        self.dir = Path(partition_dir) if partition_dir is not None else None
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.strict_unknown_producer = strict_unknown_producer
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # the log offset up to which batches have been applied
        self.last_snapshot_offset = 0
        self.ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        # completed transactions whose marker is not yet below the HW: first offset -> txn
        self.unreplicated_txns: dict[int, CompletedTxn] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- validation (client appends) ------------------------------------------------------------

    def check(self, header: BatchHeader) -> DuplicateBatch | None:
        """Validate one client batch against the current state: a DuplicateBatch for a retry,
        None when it may be appended; raises InvalidProducerEpochError /
        OutOfOrderSequenceError / InvalidTxnStateError."""
        return self.check_batches((header,))

    def check_batches(self, headers: Sequence[BatchHeader], *,
                      origin: AppendOrigin = AppendOrigin.CLIENT,
                      markers: Sequence[EndTransactionMarker | None] | None = None
                      ) -> DuplicateBatch | None:
        """``check`` for the batches of one append, in order: later batches of a producer are
        checked against the earlier ones of the same request. `markers` holds, for each control
        batch, its marker (None elsewhere). CLIENT appends get the epoch, sequence, duplicate
        and transaction checks; COORDINATOR appends the epoch, transaction and coordinator
        epoch checks; REPLICATION none. Raises InvalidProducerEpochError,
        OutOfOrderSequenceError, InvalidTxnStateError, TransactionCoordinatorFencedError."""
        if origin is AppendOrigin.REPLICATION:
            return None
        client = origin is AppendOrigin.CLIENT
        pending: dict[int, _Pending] = {}
        for i, header in enumerate(headers):
            pid = header.producer_id
            if pid < 0:
                continue
            entry = self.producers.get(pid)
            before = pending.get(pid)
            if before is None:
                before = (_Pending(entry.producer_epoch, entry.last_seq,
                                   entry.current_txn_first_offset >= 0, entry.coordinator_epoch)
                          if entry is not None else _Pending())
                if client and entry is not None and not header.is_control:
                    dup = entry.find_duplicate(header)
                    if dup is not None:
                        return DuplicateBatch(pid, entry.producer_epoch, dup.first_seq,
                                              dup.last_seq, dup.first_offset, dup.last_offset,
                                              dup.timestamp)
            if header.is_control:
                marker = markers[i] if markers is not None else None
                pending[pid] = self._check_marker(header, marker, before)
                continue
            self._check_epoch(header, before.epoch)
            if client:
                self._check_sequence(header, entry, before)
            if before.in_txn and not header.is_transactional:
                raise InvalidTxnStateError(
                    f"expected a transactional write from producer {pid}: its transaction is "
                    f"ongoing"
                )
            pending[pid] = _Pending(header.producer_epoch, header.last_sequence,
                                    before.in_txn or header.is_transactional,
                                    before.coordinator_epoch)
        return None

    @staticmethod
    def _check_epoch(header: BatchHeader, current_epoch: int) -> None:
        if header.producer_epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"epoch {header.producer_epoch} of producer {header.producer_id} is older than "
                f"the last seen epoch {current_epoch}"
            )

    @staticmethod
    def _check_marker(header: BatchHeader, marker: EndTransactionMarker | None,
                      before: _Pending) -> _Pending:
        """Kafka's appendEndTxnMarker checks: producer epoch, then coordinator epoch."""
        ProducerStateManager._check_epoch(header, before.epoch)
        if marker is None:  # an emptied control batch: nothing to check or apply
            return before
        if before.coordinator_epoch > marker.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"invalid coordinator epoch for producer {header.producer_id}: "
                f"{marker.coordinator_epoch} (zombie), {before.coordinator_epoch} (current)"
            )
        return _Pending(header.producer_epoch,
                        before.last_seq if header.producer_epoch == before.epoch else NO_SEQUENCE,
                        False, marker.coordinator_epoch)

    def _check_sequence(self, header: BatchHeader, entry: ProducerStateEntry | None,
                        before: _Pending) -> None:
        committed_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        current_epoch = before.epoch
        epoch, first_seq = header.producer_epoch, header.base_sequence
        pid = header.producer_id
        if epoch != current_epoch:
            if first_seq != 0:
                if current_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"invalid sequence {first_seq} for new epoch {epoch} of producer {pid} "
                        f"(current epoch {current_epoch}); a new epoch starts at 0"
                    )
                if self.strict_unknown_producer:
                    raise UnknownProducerIdError(
                        f"unknown producer {pid} with first sequence {first_seq} (expected 0)"
                    )
            return
        last_seq = before.last_seq
        if committed_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence for producer {pid}: {first_seq} (incoming), "
                f"{last_seq} (current end sequence)"
            )

    # -- updates --------------------------------------------------------------------------------

    def update(self, header: BatchHeader, append_time: int | None = None, *,
               base_offset: int | None = None,
               marker: EndTransactionMarker | None = None) -> TxnCompletion | None:
        """Apply one appended batch. `append_time` replaces the batch's max timestamp (the
        LogAppendTime, when the topic uses it); `base_offset` replaces the header's (when the
        header was read before the offsets were patched in); `marker` is a control batch's
        COMMIT/ABORT marker (None for an emptied control batch, which changes nothing). Returns
        the completion when a marker ended a transaction: its ``aborted_txn`` (ABORT) belongs
        in the ``.txnindex`` of the segment holding the marker."""
        pid = header.producer_id
        first_offset = header.base_offset if base_offset is None else base_offset
        last_offset = first_offset + header.last_offset_delta
        if last_offset + 1 > self.map_end_offset:
            self.map_end_offset = last_offset + 1
        if pid < 0:
            return None
        ts = header.max_timestamp if append_time is None else append_time
        entry = self.producers.get(pid)
        if header.is_control:
            if marker is None:
                return None
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid)
            completion = None
            if entry.current_txn_first_offset >= 0:
                ongoing = {p: f for f, p in self.ongoing_txns.items()}
                ongoing[pid] = entry.current_txn_first_offset
                completion = complete_transaction(ongoing, pid, first_offset, marker.is_abort)
                if completion is not None:
                    self._complete_txn(completion.completed)
            entry.maybe_update_epoch(header.producer_epoch)
            entry.current_txn_first_offset = -1
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = ts
            return completion
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        entry.maybe_update_epoch(header.producer_epoch)
        entry.batches.append(BatchMetadata(header.last_sequence, last_offset,
                                           last_offset - first_offset, ts))
        entry.last_timestamp = ts
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[first_offset] = pid
        return None

    # -- transactions ---------------------------------------------------------------------------

    def _complete_txn(self, completed: CompletedTxn) -> None:
        """Kafka's completeTxn: the transaction is no longer ongoing but stays unstable until
        the high watermark passes its marker."""
        self.ongoing_txns.pop(completed.first_offset, None)
        self.unreplicated_txns[completed.first_offset] = completed

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing or unreplicated transaction (None: none)."""
        if not self.ongoing_txns and not self.unreplicated_txns:
            return None
        return lowest_unstable_offset(self.ongoing_txns, self.unreplicated_txns)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is below the high watermark are stable now (Kafka's
        onHighWatermarkUpdated / removeUnreplicatedTransactions)."""
        if self.unreplicated_txns:
            done = [f for f, txn in self.unreplicated_txns.items()
                    if txn.last_offset < high_watermark]
            for first in done:
                del self.unreplicated_txns[first]

    def _reset_transactions(self) -> None:
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        for pid, entry in self.producers.items():
            if entry.current_txn_first_offset >= 0:
                self.ongoing_txns[entry.current_txn_first_offset] = pid

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (and every snapshot): the log restarts at `offset`."""
        self.producers.clear()
        self._reset_transactions()
        for snapshot_offset in self.snapshot_offsets():
            self._snapshot_path(snapshot_offset).unlink(missing_ok=True)
        self.map_end_offset = offset
        self.last_snapshot_offset = 0

    def clear(self) -> None:
        self.producers.clear()
        self._reset_transactions()

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset < 0
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers idle for producer.id.expiration.ms (no open transaction)."""
        expired = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        # (a producer with an ongoing transaction never expires: is_expired)
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots ------------------------------------------------------------------------------

    def _snapshot_path(self, offset: int) -> Path:
        assert self.dir is not None
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        if self.dir is None or not self.dir.is_dir():
            return []
        offsets = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                try:
                    offsets.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        return sorted(offsets)

    def serialize(self) -> bytes:
        body = bytearray(_SNAP_COUNT.pack(len(self.producers)))
        for pid, e in self.producers.items():
            body += _SNAP_ENTRY.pack(pid, e.producer_epoch, e.last_seq, e.last_data_offset,
                                     e.last_offset_delta, e.last_timestamp, e.coordinator_epoch,
                                     e.current_txn_first_offset)
        return _SNAP_HEAD.pack(SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)

    @staticmethod
    def parse_snapshot(data: bytes) -> list[ProducerStateEntry]:
        if len(data) < _SNAP_HEAD.size + _SNAP_COUNT.size:
            raise CorruptSnapshotError("snapshot too short")
        version, crc = _SNAP_HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"snapshot has unknown version {version}")
        if crc32c(data[_SNAP_HEAD.size:]) != crc:
            raise CorruptSnapshotError("snapshot CRC mismatch")
        (count,) = _SNAP_COUNT.unpack_from(data, _SNAP_HEAD.size)
        start = _SNAP_HEAD.size + _SNAP_COUNT.size
        if count < 0 or len(data) != start + count * _SNAP_ENTRY.size:
            raise CorruptSnapshotError("snapshot size does not match its entry count")
        entries = []
        for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in _SNAP_ENTRY.iter_unpack(
                data[start:]):
            entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coord, last_timestamp=ts,
                                       current_txn_first_offset=txn)
            if last_offset >= 0:
                entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
            entries.append(entry)
        return entries

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` if the state moved since the last snapshot.
        Without `sync` the file is not fsynced (Kafka's roll does the same): a snapshot lost or
        torn by a power failure fails its CRC and an older one (or the log) is used."""
        if self.dir is None or self.map_end_offset <= self.last_snapshot_offset:
            return None
        if not self.dir.is_dir():
            return None
        path = self._snapshot_path(self.map_end_offset)
        if sync:
            write_atomically(path, self.serialize())
        else:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(self.serialize())
            file_system.replace(tmp, path)
        self.last_snapshot_offset = self.map_end_offset
        return path

    def load_latest_snapshot(self, log_start_offset: int, max_offset: int,
                             now_ms: int | None = None) -> int:
        """Reset the state to the newest valid snapshot at or below `max_offset` (deleting
        snapshots above it and corrupt ones) and return the offset to rebuild from (the
        snapshot's, or `log_start_offset` when none)."""
        self.producers.clear()
        for offset in reversed(self.snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = self.parse_snapshot(path.read_bytes())
            except (CorruptSnapshotError, OSError, struct.error):
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                if now_ms is None or not self.is_expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
            self._reset_transactions()
            self.map_end_offset = self.last_snapshot_offset = offset
            return offset
        self._reset_transactions()
        self.map_end_offset = log_start_offset
        self.last_snapshot_offset = 0
        return log_start_offset

    def read_latest_snapshot(self, max_offset: int
                             ) -> tuple[int, list[ProducerStateEntry]] | None:
        """The newest readable snapshot at or below `max_offset` (its offset and entries), the
        files left as they are; None when there is none."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                continue
            try:
                return offset, self.parse_snapshot(self._snapshot_path(offset).read_bytes())
            except (CorruptSnapshotError, OSError, struct.error):
                continue
        return None

    def restore(self, entries: Iterable[ProducerStateEntry], offset: int) -> None:
        """Start over from `entries`, the state as of `offset` (their open transactions
        ongoing again)."""
        self.producers.clear()
        for entry in entries:
            self.producers[entry.producer_id] = entry
        self._reset_transactions()
        self.map_end_offset = offset

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset < offset:
                self._snapshot_path(snapshot_offset).unlink(missing_ok=True)

