"""LSO and aborted-range computation as pure functions (storage/transaction_state.py, Kafka's
ProducerStateManager / Log rules), with hypothesis. Not yet wired into the broker."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.transaction_index import (
    AbortedTransaction,
    AbortedTxn,
    TxnIndexSearchResult,
    search_aborted_txns,
)
from odradek.storage.transaction_state import (
    CompletedTxn,
    aborted_overlapping,
    collect_aborted_transactions,
    complete_transaction,
    fetch_aborted_transactions,
    first_unstable_offset,
    last_stable_offset,
)

offsets = st.integers(min_value=0, max_value=10_000)


# -- the last stable offset --------------------------------------------------------------------

@given(st.lists(offsets, max_size=8), offsets, st.lists(offsets, max_size=4))
def test_lso_is_at_most_hw_and_never_above_an_unstable_first_offset(
        ongoing: list[int], hw: int, unreplicated: list[int]) -> None:
    lso = last_stable_offset(ongoing, hw, unreplicated)
    assert lso <= hw
    assert all(lso <= first for first in ongoing + unreplicated)
    assert lso == hw or lso in ongoing + unreplicated


@given(offsets)
def test_lso_is_hw_without_transactions(hw: int) -> None:
    assert last_stable_offset([], hw) == hw
    assert first_unstable_offset([]) is None


@given(st.lists(offsets, min_size=1, max_size=8), offsets)
def test_lso_is_the_smallest_first_offset_below_hw(ongoing: list[int], hw: int) -> None:
    assert last_stable_offset(ongoing, hw) == min(min(ongoing), hw)


# -- completion on a marker --------------------------------------------------------------------

def test_abort_records_the_next_open_transaction_of_another_producer() -> None:
    ongoing = {1: 10, 2: 14, 3: 12}
    done = complete_transaction(ongoing, producer_id=2, marker_offset=20, is_abort=True)
    assert done is not None
    assert done.completed == CompletedTxn(2, 14, 20, True)
    assert done.last_stable_offset == 10
    assert done.aborted_txn == AbortedTxn(2, 14, 20, 10)
    assert ongoing == {1: 10, 2: 14, 3: 12}  # the caller removes it after the index append


def test_abort_with_no_other_open_transaction_records_marker_plus_one() -> None:
    done = complete_transaction({7: 3}, 7, 9, is_abort=True)
    assert done is not None
    assert done.aborted_txn == AbortedTxn(7, 3, 9, 10)


def test_commit_indexes_nothing() -> None:
    done = complete_transaction({7: 3, 8: 5}, 7, 9, is_abort=False)
    assert done is not None
    assert done.completed == CompletedTxn(7, 3, 9, False)
    assert done.aborted_txn is None
    assert done.last_stable_offset == 5


def test_a_marker_without_an_ongoing_transaction_completes_nothing() -> None:
    assert complete_transaction({8: 5}, 7, 9, is_abort=True) is None


def test_a_marker_below_the_first_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        complete_transaction({7: 10}, 7, 9, is_abort=True)


# -- a simulated partition: markers, segments, indexes ------------------------------------------

@dataclass
class Segment:
    base_offset: int
    entries: list[AbortedTxn] = field(default_factory=list)

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        return search_aborted_txns(self.entries, fetch_offset, upper_bound_offset)


@dataclass
class Partition:
    """Offsets assigned as a log would; markers completed with complete_transaction; aborted
    transactions appended to the active segment's index."""

    end_offset: int = 0
    ongoing: dict[int, int] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=lambda: [Segment(0)])
    aborted: list[AbortedTxn] = field(default_factory=list)
    # offset -> producer id of transactional data, for the brute-force LSO check
    txn_data: dict[int, int] = field(default_factory=dict)
    closed: set[tuple[int, int]] = field(default_factory=set)  # (pid, first offset) ended

    def apply(self, op: tuple[str, int, int]) -> None:
        kind, pid, n = op
        if kind == "data":
            self.ongoing.setdefault(pid, self.end_offset)
            for o in range(self.end_offset, self.end_offset + n):
                self.txn_data[o] = pid
            self.end_offset += n
        elif kind == "plain":
            self.end_offset += n
        elif kind in ("commit", "abort"):
            done = complete_transaction(self.ongoing, pid, self.end_offset, kind == "abort")
            if done is not None:
                if done.aborted_txn is not None:
                    self.segments[-1].entries.append(done.aborted_txn)
                    self.aborted.append(done.aborted_txn)
                del self.ongoing[pid]
            self.end_offset += 1
        elif kind == "roll" and self.segments[-1].base_offset < self.end_offset:
            self.segments.append(Segment(self.end_offset))

    def from_floor_segment(self, offset: int) -> list[Segment]:
        start = max(i for i, s in enumerate(self.segments) if s.base_offset <= offset)
        return self.segments[start:]


ops = st.lists(
    st.tuples(st.sampled_from(["data", "data", "plain", "commit", "abort", "roll"]),
              st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=3)),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.data())
def test_collected_aborted_range_equals_a_brute_force_filter(
        history: list[tuple[str, int, int]], data: st.DataObject) -> None:
    part = Partition()
    for op in history:
        part.apply(op)
    end = part.end_offset
    for _ in range(10):
        fetch = data.draw(st.integers(min_value=0, max_value=end))
        upper = data.draw(st.integers(min_value=fetch, max_value=end + 1))
        brute = [t for t in part.aborted if t.last_offset >= fetch and t.first_offset < upper]
        assert aborted_overlapping(part.aborted, fetch, upper) == brute
        # the segment walk with Kafka's early stop loses nothing
        walked = collect_aborted_transactions(part.from_floor_segment(fetch), fetch, upper)
        assert walked == brute
        assert fetch_aborted_transactions(part.from_floor_segment(fetch), fetch, upper) == [
            AbortedTransaction(t.producer_id, t.first_offset) for t in brute]


@settings(max_examples=200, deadline=None)
@given(ops)
def test_indexed_entries_are_ordered_and_their_lso_is_sound(
        history: list[tuple[str, int, int]]) -> None:
    part = Partition()
    for op in history:
        part.apply(op)
    lasts = [t.last_offset for t in part.aborted]
    assert lasts == sorted(set(lasts))  # what TransactionIndex.append requires
    for t in part.aborted:
        assert t.first_offset <= t.last_offset
        # the LSO recorded is the marker + 1, or an earlier first offset of another producer
        assert t.last_stable_offset <= t.last_offset + 1


@settings(max_examples=200, deadline=None)
@given(ops, st.data())
def test_lso_of_a_simulated_partition_leaves_no_open_transaction_below_it(
        history: list[tuple[str, int, int]], data: st.DataObject) -> None:
    part = Partition()
    for op in history:
        part.apply(op)
    hw = data.draw(st.integers(min_value=0, max_value=part.end_offset))
    lso = last_stable_offset(part.ongoing.values(), hw)
    assert lso <= hw
    # no offset below the LSO belongs to a transaction that is still open
    open_from = {pid: first for pid, first in part.ongoing.items()}
    for offset, pid in part.txn_data.items():
        if pid in open_from and offset >= open_from[pid]:
            assert offset >= lso
    if not part.ongoing:
        assert lso == hw
