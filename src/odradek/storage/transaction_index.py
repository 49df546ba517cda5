"""Kafka's transaction index (``<20-digit base offset>.txnindex``, KIP-98): the aborted
transactions whose ABORT marker landed in one segment. Mirrors Kafka's ``TransactionIndex``,
``AbortedTxn`` and ``TxnIndexSearchResult`` (core ``kafka.log``, 2.8).

Each ``LogSegment`` holds one as ``txn_index``: appended when an ABORT marker lands in the segment
(leader, follower and recovery alike), truncated, renamed, flushed and deleted with the segment.

One entry (``AbortedTxn``) is 34 bytes, big-endian, no padding::

    version i16 (0) | producerId i64 | firstOffset i64 | lastOffset i64 | lastStableOffset i64

``firstOffset`` is the transaction's first data offset, ``lastOffset`` the offset of its ABORT
marker, and ``lastStableOffset`` the partition's LSO once the abort completed: the first offset of
the earliest transaction of *another* producer still open at that moment, else lastOffset + 1.
Entries are appended in marker order, so their last offsets strictly increase (Kafka's check in
``append``). A read_committed fetch asks each segment from the one holding the fetch offset on for
the entries overlapping ``[fetchOffset, upperBoundOffset)``; a segment's answer is *complete* once
an entry's lastStableOffset reaches the upper bound, because no transaction aborted later can start
below it.

Like the other indexes (``index.py``), the entries live in a ``bytearray`` that is the file's
content; each append is one ``write`` on an ``O_APPEND`` descriptor, ``flush`` fsyncs, and the file
is created only by the first append (Kafka creates it lazily too). A crash in the middle of an
append leaves a partial last entry: loading drops it (the file is cut back to whole entries) and
records how many bytes went in ``torn_tail_bytes``. The dropped entry's ABORT marker is in the log
past the recovery point, so segment recovery re-adds it, as Kafka's ``LogSegment.recover`` rebuilds
the transaction index from the producer state. ``sanity_check`` raises ``CorruptIndexError`` for
what cannot be repaired that way (Kafka's check: an entry ending below the segment's base offset;
ours too: an unknown version, last offsets not increasing, firstOffset above lastOffset).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .index import CorruptIndexError, IndexFile, InvalidOffsetError

TXN_INDEX_SUFFIX = ".txnindex"

ABORTED_TXN_VERSION = 0  # AbortedTxn.CurrentVersion
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34: AbortedTxn.TotalSize


def txn_index_path(directory: Path, base_offset: int) -> Path:
    """``<dir>/<20-digit base offset>.txnindex`` (Kafka's ``Log.transactionIndexFile``)."""
    return Path(directory) / f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


class AbortedTransaction(NamedTuple):
    """What a read_committed Fetch response lists per partition (FetchResponse's
    ``AbortedTransaction``: producer_id, first_offset)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def to_bytes(self) -> bytes:
        """The entry's 34 bytes as Kafka writes them."""
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first, last, lso = _ENTRY.unpack_from(buf, position)
        return cls(producer_id, first, last, lso, version)

    def as_aborted_transaction(self) -> AbortedTransaction:
        """The (producer id, first offset) pair a Fetch response carries
        (``AbortedTxn.asAbortedTransaction``)."""
        return AbortedTransaction(self.producer_id, self.first_offset)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Kafka's ``TxnIndexSearchResult``: the entries of one index overlapping a fetch range, and
    whether the search may stop here (no later segment can hold another overlapping entry)."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


def search_aborted_txns(entries: Iterable[AbortedTxn], fetch_offset: int,
                        upper_bound_offset: int) -> TxnIndexSearchResult:
    """The entries with ``last_offset >= fetch_offset`` and ``first_offset < upper_bound_offset``,
    in index order, stopping (complete) at the first entry whose last stable offset is at or above
    the upper bound (``TransactionIndex.collectAbortedTxns``; pure, for the index and for tests)."""
    found: list[AbortedTxn] = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(found, True)
    return TxnIndexSearchResult(found, False)


class TransactionIndex(IndexFile):
    """The ``.txnindex`` of one segment (Kafka's ``TransactionIndex(startOffset, file)``)."""

    def __init__(self, path: Path, start_offset: int) -> None:
        super().__init__(path)
        self.start_offset = start_offset
        self._last_offset: int | None = None
        self.torn_tail_bytes = 0

    # -- loading --------------------------------------------------------------------------------

    def _data(self) -> bytearray:
        buf = self._buf
        if buf is None:
            buf = self._read_file()
            torn = len(buf) % ENTRY_SIZE
            if torn:
                # A crash mid-append: keep the whole entries, cut the file back to them.
                del buf[len(buf) - torn:]
                os.truncate(self.path, len(buf))
                self._dirty = True
                self.torn_tail_bytes = torn
            self._buf = buf
            self._last_offset = (_ENTRY.unpack_from(buf, len(buf) - ENTRY_SIZE)[3]
                                 if buf else None)
        return buf

    def load(self) -> None:
        """Read the file now (dropping a torn tail, see ``torn_tail_bytes``)."""
        self._data()

    # -- content --------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._data()) // ENTRY_SIZE

    @property
    def last_offset(self) -> int | None:
        """The last offset (ABORT marker offset) of the last entry, None when empty."""
        self._data()
        return self._last_offset

    def __iter__(self) -> Iterator[AbortedTxn]:
        buf = self._data()
        for pos in range(0, len(buf), ENTRY_SIZE):
            txn = AbortedTxn.from_bytes(buf, pos)
            if txn.version > ABORTED_TXN_VERSION:
                raise CorruptIndexError(
                    f"transaction index {self.path} has an entry of unknown version "
                    f"{txn.version} (current {ABORTED_TXN_VERSION})"
                )
            yield txn

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in order (``TransactionIndex.allAbortedTxns``)."""
        return list(self)

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        """The entries overlapping ``[fetch_offset, upper_bound_offset)`` and whether the search
        is complete (``TransactionIndex.collectAbortedTxns``)."""
        return search_aborted_txns(self, fetch_offset, upper_bound_offset)

    # -- writing --------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn, *, persist: bool = True) -> None:
        """Add one entry. Its last offset must be above the last entry's (Kafka raises
        IllegalArgumentException; here InvalidOffsetError)."""
        buf = self._data()
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise InvalidOffsetError(
                f"the last offset of appended transactions must increase: {txn.last_offset} is "
                f"not above the last offset {self._last_offset} of {self.path}"
            )
        entry = txn.to_bytes()
        buf += entry
        self._last_offset = txn.last_offset
        if persist:
            self._write(entry)

    def _cut(self, size: int) -> None:
        if self._truncate_bytes(size):
            buf = self._data()
            self._last_offset = _ENTRY.unpack_from(buf, size - ENTRY_SIZE)[3] if size else None

    def truncate_to(self, offset: int) -> None:
        """Remove every entry from the first whose last offset is >= `offset` on
        (``TransactionIndex.truncateTo``: the log was truncated to `offset`)."""
        buf = self._data()
        for pos in range(0, len(buf), ENTRY_SIZE):
            if _ENTRY.unpack_from(buf, pos)[3] >= offset:
                self._cut(pos)
                return

    def reset(self) -> None:
        """Remove every entry (``TransactionIndex.reset``, before recovery rebuilds it)."""
        self._cut(0)

    # -- lifecycle ------------------------------------------------------------------------------

    def release(self) -> None:
        """Close the descriptor and drop the in-memory entries (they reload on demand)."""
        super().release()
        self._last_offset = None

    def close(self) -> None:
        self.flush()
        self.release()

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless every entry is of a known version, ends at or above the
        segment's base offset (Kafka's ``sanityCheck``), starts at or below its end, and last
        offsets strictly increase."""
        previous: int | None = None
        for txn in self:
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} in index {self.path} is below the "
                    f"start offset {self.start_offset}"
                )
            if txn.first_offset > txn.last_offset:
                raise CorruptIndexError(
                    f"aborted transaction {txn} in index {self.path} starts after its end"
                )
            if previous is not None and txn.last_offset <= previous:
                raise CorruptIndexError(
                    f"transaction index {self.path} has last offsets that do not increase"
                )
            previous = txn.last_offset
