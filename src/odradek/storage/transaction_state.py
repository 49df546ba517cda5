"""The partition side of transactions as pure functions (KIP-98): the last stable offset, the
aborted transactions a read_committed fetch returns, and what completing a transaction on a marker
records. Mirrors Kafka 2.8's ``ProducerStateManager.firstUnstableOffset`` /
``lastStableOffset(completedTxn)``, ``ProducerAppendInfo.appendEndTxnMarker`` (the
``CompletedTxn``), ``Log.lastStableOffset`` and ``Log.collectAbortedTransactions``.

``producer_state.ProducerStateManager`` calls ``complete_transaction`` for every marker; the log
and Fetch/ListOffsets use the LSO and ``collect_aborted_transactions``.

* **LSO.** A transaction is *unstable* from its first offset until its outcome is decided and
  replicated: while it is ongoing, and, once its marker is written, until the high watermark
  passes the marker (Kafka keeps those as ``unreplicatedTxns``). The LSO is the smallest first
  offset of an unstable transaction, but never above the HW:
  ``LSO = min(first offsets of ongoing and unreplicated transactions, HW)``.
* **Completion.** A COMMIT or ABORT marker at offset ``m`` from a producer with an ongoing
  transaction starting at ``f`` completes ``CompletedTxn(pid, f, m, aborted)``. A marker from a
  producer without one completes nothing (an empty transaction: Kafka emits no CompletedTxn, so
  it touches neither the LSO nor the index). An ABORT is indexed as ``AbortedTxn(pid, f, m, lso)``
  where ``lso`` is the first offset of the earliest ongoing transaction of *another* producer, or
  ``m + 1`` when there is none.
* **Fetch.** A read_committed fetch of ``[fetch_offset, upper_bound)`` returns every aborted
  transaction with ``last_offset >= fetch_offset`` and ``first_offset < upper_bound``; the log asks
  the transaction index of each segment from the one holding the fetch offset on, and stops at the
  first segment whose search is complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from .transaction_index import AbortedTransaction, AbortedTxn, TxnIndexSearchResult


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker (Kafka's ``CompletedTxn``): first data offset, the
    marker's offset, and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class TxnCompletion:
    """What a marker does to the partition: the completed transaction, the LSO recorded with it,
    and the entry to append to the segment's ``.txnindex`` (ABORT only)."""

    completed: CompletedTxn
    last_stable_offset: int
    aborted_txn: AbortedTxn | None


def first_unstable_offset(ongoing_first_offsets: Iterable[int],
                          unreplicated_first_offsets: Iterable[int] = ()) -> int | None:
    """The smallest first offset of an ongoing or completed-but-unreplicated transaction, None
    when there is none (``ProducerStateManager.firstUnstableOffset``)."""
    return min((*ongoing_first_offsets, *unreplicated_first_offsets), default=None)


def last_stable_offset(ongoing_first_offsets: Iterable[int], high_watermark: int,
                       unreplicated_first_offsets: Iterable[int] = ()) -> int:
    """``min(first unstable offset, HW)`` (``Log.lastStableOffset``): where read_committed fetches
    stop and what ListOffsets answers for read_committed."""
    first = first_unstable_offset(ongoing_first_offsets, unreplicated_first_offsets)
    return high_watermark if first is None or first >= high_watermark else first


def completed_txn_last_stable_offset(ongoing: Mapping[int, int], completed: CompletedTxn) -> int:
    """The LSO stored with a completed transaction: the first offset of the earliest ongoing
    transaction of another producer, else the marker's offset + 1
    (``ProducerStateManager.lastStableOffset(completedTxn)``). `ongoing` maps producer id to the
    first offset of its ongoing transaction, before this completion removes it."""
    others = [first for pid, first in ongoing.items() if pid != completed.producer_id]
    return min(others) if others else completed.last_offset + 1


def complete_transaction(ongoing: Mapping[int, int], producer_id: int, marker_offset: int,
                         is_abort: bool) -> TxnCompletion | None:
    """Apply a COMMIT (`is_abort` False) or ABORT marker written at `marker_offset` by
    `producer_id`. Returns None when the producer has no ongoing transaction (an empty one:
    nothing to complete or index); otherwise the completion, whose ``aborted_txn`` is the entry to
    append to the ``.txnindex`` of the segment holding the marker. `ongoing` is not modified: the
    caller removes the producer's entry (``completeTxn``) after the index append succeeds."""
    first = ongoing.get(producer_id)
    if first is None:
        return None
    if marker_offset < first:
        raise ValueError(
            f"marker offset {marker_offset} of producer {producer_id} is below its transaction's "
            f"first offset {first}"
        )
    completed = CompletedTxn(producer_id, first, marker_offset, is_abort)
    lso = completed_txn_last_stable_offset(ongoing, completed)
    aborted = AbortedTxn(producer_id, first, marker_offset, lso) if is_abort else None
    return TxnCompletion(completed, lso, aborted)


def aborted_overlapping(aborted: Iterable[AbortedTxn], fetch_offset: int,
                        upper_bound_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, in order: the
    filter of ``TransactionIndex.collectAbortedTxns`` without its early stop."""
    return [txn for txn in aborted
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset]


class AbortedTxnSearch(Protocol):
    """What the log asks of each segment's transaction index."""

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult: ...


def collect_aborted_transactions(indexes: Iterable[AbortedTxnSearch], fetch_offset: int,
                                 upper_bound_offset: int) -> list[AbortedTxn]:
    """Walk the transaction indexes of the segments from the one holding `fetch_offset` on, in
    order, gathering overlapping entries until a search is complete
    (``Log.collectAbortedTransactions``)."""
    found: list[AbortedTxn] = []
    for index in indexes:
        result = index.collect_aborted_txns(fetch_offset, upper_bound_offset)
        found.extend(result.aborted_transactions)
        if result.is_complete:
            break
    return found


def fetch_aborted_transactions(indexes: Iterable[AbortedTxnSearch], fetch_offset: int,
                               upper_bound_offset: int) -> list[AbortedTransaction]:
    """The ``aborted_transactions`` of a read_committed Fetch partition response: (producer id,
    first offset) of each aborted transaction overlapping the fetched range."""
    return [txn.as_aborted_transaction()
            for txn in collect_aborted_transactions(indexes, fetch_offset, upper_bound_offset)]
