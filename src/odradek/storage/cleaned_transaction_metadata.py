"""What the log cleaner decides about transactions (KIP-98), as a small state machine and pure
functions: Kafka 2.8's ``CleanedTransactionMetadata`` / ``AbortedTransactionMetadata``, the
cleaner's ``shouldDiscardBatch`` and the batch retention of its ``RecordFilter``
(``checkBatchRetention`` with ``isBatchLastRecordOfProducer``).

The cleaner reads a log in offset order. ``CleanedTransactionMetadata`` is fed, in that order,
every batch it reads (``on_batch_read``) and every control batch (``on_control_batch_read``),
knowing beforehand the aborted transactions overlapping the range (from the segments'
transaction indexes). It answers whether the batch may be discarded:

* a **data batch** of an aborted transaction (transactional, its producer inside an aborted
  range that has started and whose ABORT marker has not been read yet) is discarded whole: the
  offset map skips its keys and cleaning removes its records;
* an **ABORT marker** may go once a pass read no batch of its transaction (its data is gone);
  while batches were read, the marker stays and its ``AbortedTxn`` is kept for the cleaned
  segment's ``.txnindex`` (``retained_aborted``), since read_committed fetches still need it;
* a **COMMIT marker** may go once a pass read no batch of its transaction;
* a marker that may go is still kept while its segment is newer than the delete horizon
  (``retain_txn_markers``, the tombstone rule), an emptied control batch may always go.

Whatever the verdict, the batch holding a producer's last data offset (or, for a producer whose
last entry is a marker, that marker of its current epoch) is kept -- as an empty batch when all
its records go -- so that the producer's sequence and epoch survive compaction
(``BatchRetention.RETAIN_EMPTY``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from ..protocol.control_records import ControlRecordType
from ..protocol.records import BatchHeader
from .transaction_index import AbortedTxn


class BatchRetention(Enum):
    """Kafka's ``MemoryRecords.RecordFilter.BatchRetention``: what happens to a batch whose
    records all go (DELETE: the batch goes whatever its records; DELETE_EMPTY: it goes only
    when no record is kept; RETAIN_EMPTY: kept as an empty batch)."""

    DELETE = "delete"
    DELETE_EMPTY = "delete_empty"
    RETAIN_EMPTY = "retain_empty"


@dataclass(frozen=True, slots=True)
class LastRecord:
    """Kafka's ``LastRecord`` of an active producer: the offset of its last data batch (None
    when its last entry is a marker that started a new epoch) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


def is_batch_last_record_of_producer(header: BatchHeader,
                                     last_records: Mapping[int, LastRecord]) -> bool:
    """Whether the batch is what keeps its producer's state (Kafka's
    ``isBatchLastRecordOfProducer``): the batch ending at the producer's last data offset, or,
    for a producer without one, a control batch of its current epoch."""
    last = last_records.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


@dataclass(slots=True)
class AbortedTransactionMetadata:
    """An aborted transaction the cleaner is inside of, and the last offset of the last of its
    batches read in this pass (None: none read)."""

    aborted_txn: AbortedTxn
    last_observed_batch_offset: int | None = None


@dataclass(slots=True)
class CleanedTransactionMetadata:
    """The transaction state of one cleaning pass (or of one offset-map build): the aborted
    transactions not reached yet (a heap by first offset), those being read through (by
    producer id), the producers with an open committed-or-undecided transaction, and the
    aborted transactions whose marker was kept (to write into the cleaned ``.txnindex``)."""

    _pending: list[tuple[int, int, AbortedTxn]] = field(default_factory=list)
    ongoing_committed: set[int] = field(default_factory=set)
    ongoing_aborted: dict[int, AbortedTransactionMetadata] = field(default_factory=dict)
    retained_aborted: list[AbortedTxn] = field(default_factory=list)
    _seen: set[AbortedTxn] = field(default_factory=set)

    @classmethod
    def of(cls, aborted: Iterable[AbortedTxn]) -> CleanedTransactionMetadata:
        meta = cls()
        meta.add_aborted_transactions(aborted)
        return meta

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        """Add aborted transactions (a transaction given twice counts once)."""
        for txn in aborted:
            if txn not in self._seen:
                self._seen.add(txn)
                heapq.heappush(self._pending, (txn.first_offset, txn.last_offset, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            self.ongoing_aborted.setdefault(txn.producer_id, AbortedTransactionMetadata(txn))

    def on_control_batch_read(self, header: BatchHeader,
                              control_type: ControlRecordType | None) -> bool:
        """Read a control batch whose (first) record has `control_type` (None: the batch is
        empty, an earlier pass emptied it). True when the batch may be discarded as far as its
        transaction is concerned (Kafka's ``onControlBatchRead``)."""
        self._consume_aborted_up_to(header.last_offset)
        if control_type is None:
            return True
        pid = header.producer_id
        if control_type == ControlRecordType.ABORT:
            aborted = self.ongoing_aborted.pop(pid, None)
            if aborted is not None and aborted.last_observed_batch_offset is not None:
                self.retained_aborted.append(aborted.aborted_txn)
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """Read a data batch; True when it belongs to an aborted transaction (discard it)
        (Kafka's ``onBatchRead``)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self.ongoing_aborted.get(header.producer_id)
        if aborted is not None:
            aborted.last_observed_batch_offset = header.last_offset
            return True
        self.ongoing_committed.add(header.producer_id)
        return False

    def take_retained_aborted(self) -> list[AbortedTxn]:
        """The aborted transactions whose marker was kept since the last call, in marker order:
        the entries of the cleaned segment's transaction index."""
        out, self.retained_aborted = self.retained_aborted, []
        return out


def should_discard_batch(header: BatchHeader, control_type: ControlRecordType | None,
                         meta: CleanedTransactionMetadata, retain_txn_markers: bool) -> bool:
    """Kafka's ``shouldDiscardBatch``: feeds `meta` the batch and says whether all its records
    go regardless of the offset map (aborted data; a marker past its use and the horizon)."""
    if header.is_control:
        return meta.on_control_batch_read(header, control_type) and not retain_txn_markers
    return meta.on_batch_read(header)


def batch_retention(header: BatchHeader, discard: bool,
                    last_records: Mapping[int, LastRecord]) -> BatchRetention:
    """Kafka's ``checkBatchRetention``: a producer's last batch is kept (empty if need be),
    a discarded batch goes, any other goes only when none of its records is kept."""
    if header.has_producer_id and is_batch_last_record_of_producer(header, last_records):
        return BatchRetention.RETAIN_EMPTY
    if discard:
        return BatchRetention.DELETE
    return BatchRetention.DELETE_EMPTY


def overlapping(aborted: Iterable[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions with data or marker in [start, end): ABORT marker at or after
    `start`, first offset before `end`."""
    return [t for t in aborted if t.last_offset >= start and t.first_offset < end]


__all__ = [
    "AbortedTransactionMetadata",
    "BatchRetention",
    "CleanedTransactionMetadata",
    "LastRecord",
    "batch_retention",
    "is_batch_last_record_of_producer",
    "overlapping",
    "should_discard_batch",
]
