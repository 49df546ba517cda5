"""The ``.txnindex`` (Kafka's TransactionIndex): entry format, append order, search, truncation,
reopening and recovery of a torn tail. The module is not yet wired into the broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.index import CorruptIndexError, InvalidOffsetError
from odradek.storage.transaction_index import (
    ENTRY_SIZE,
    AbortedTransaction,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
    txn_index_path,
)

BASE = 100


def index(tmp_path: Path, base: int = BASE) -> TransactionIndex:
    return TransactionIndex(txn_index_path(tmp_path, base), base)


def test_path_is_the_base_offset_with_the_txnindex_suffix(tmp_path: Path) -> None:
    assert txn_index_path(tmp_path, 42).name == "00000000000000000042.txnindex"


def test_golden_bytes_of_one_entry(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(producer_id=0x0102030405060708, first_offset=0x10, last_offset=0x120,
                          last_stable_offset=0x121))
    expected = (
        bytes.fromhex("0000")                   # version int16 = 0
        + bytes.fromhex("0102030405060708")     # producer id int64
        + bytes.fromhex("0000000000000010")     # first offset int64
        + bytes.fromhex("0000000000000120")     # last offset int64
        + bytes.fromhex("0000000000000121")     # last stable offset int64
    )
    assert ENTRY_SIZE == 34
    assert idx.path.read_bytes() == expected
    assert AbortedTxn.from_bytes(expected) == AbortedTxn(0x0102030405060708, 0x10, 0x120, 0x121)


def test_negative_producer_id_round_trips() -> None:
    txn = AbortedTxn(-1, 5, 6, 7)
    assert txn.to_bytes()[2:10] == b"\xff" * 8
    assert AbortedTxn.from_bytes(txn.to_bytes()) == txn


def test_file_is_created_by_the_first_append_only(tmp_path: Path) -> None:
    idx = index(tmp_path)
    assert idx.entries == 0
    assert idx.collect_aborted_txns(0, 1000) == TxnIndexSearchResult([], False)
    assert not idx.path.exists()
    idx.append(AbortedTxn(1, 100, 105, 106))
    assert idx.path.stat().st_size == ENTRY_SIZE


def test_append_refuses_last_offsets_that_do_not_increase(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 100, 110, 111))
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(2, 105, 110, 111))
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(2, 101, 109, 111))
    idx.append(AbortedTxn(2, 101, 111, 112))
    assert idx.entries == 2
    assert idx.path.stat().st_size == 2 * ENTRY_SIZE


def test_append_order_is_checked_after_reopening(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 100, 110, 111))
    idx.close()
    again = index(tmp_path)
    assert again.last_offset == 110
    with pytest.raises(InvalidOffsetError):
        again.append(AbortedTxn(2, 100, 109, 111))


def test_collect_returns_overlapping_entries_and_completeness(tmp_path: Path) -> None:
    idx = index(tmp_path)
    a = AbortedTxn(1, 100, 110, 105)   # another transaction was open from 105
    b = AbortedTxn(2, 105, 120, 121)
    c = AbortedTxn(3, 130, 140, 141)
    for txn in (a, b, c):
        idx.append(txn)
    # [111, 125): a ends before it; b overlaps; b's LSO 121 < 125 so c must be looked at: it
    # starts at 130 and does not overlap, but its LSO 141 >= 125 makes the search complete.
    assert idx.collect_aborted_txns(111, 125) == TxnIndexSearchResult([b], True)
    # [100, 106): a overlaps, b starts at 105 < 106 and overlaps; b's LSO completes it.
    assert idx.collect_aborted_txns(100, 106) == TxnIndexSearchResult([a, b], True)
    # past every entry's LSO: incomplete, the next segment must be asked
    assert idx.collect_aborted_txns(141, 200) == TxnIndexSearchResult([], False)
    assert [t.as_aborted_transaction() for t in idx.collect_aborted_txns(0, 1000)
            .aborted_transactions] == [AbortedTransaction(1, 100), AbortedTransaction(2, 105),
                                       AbortedTransaction(3, 130)]


def test_truncate_to_drops_entries_ending_at_or_after_the_offset(tmp_path: Path) -> None:
    idx = index(tmp_path)
    txns = [AbortedTxn(1, 100, 110, 111), AbortedTxn(2, 105, 120, 121),
            AbortedTxn(3, 130, 140, 141)]
    for txn in txns:
        idx.append(txn)
    idx.truncate_to(141)
    assert idx.all_aborted_txns() == txns
    idx.truncate_to(120)
    assert idx.all_aborted_txns() == txns[:1]
    assert idx.path.stat().st_size == ENTRY_SIZE
    assert idx.last_offset == 110
    # appending after a truncation continues from the remaining entries
    idx.append(AbortedTxn(4, 112, 115, 116))
    idx.truncate_to(0)
    assert idx.entries == 0
    assert idx.last_offset is None
    assert idx.path.stat().st_size == 0


def test_reopen_reads_the_same_entries(tmp_path: Path) -> None:
    idx = index(tmp_path)
    txns = [AbortedTxn(7, 100 + 10 * i, 105 + 10 * i, 106 + 10 * i) for i in range(5)]
    for txn in txns:
        idx.append(txn)
    idx.flush()
    idx.close()
    again = index(tmp_path)
    assert again.all_aborted_txns() == txns
    again.sanity_check()
    again.append(AbortedTxn(8, 200, 210, 211))
    again.release()
    assert index(tmp_path).entries == 6


@pytest.mark.parametrize("torn", [1, 10, ENTRY_SIZE - 1])
def test_a_torn_tail_is_dropped_on_load(tmp_path: Path, torn: int) -> None:
    idx = index(tmp_path)
    first = AbortedTxn(1, 100, 110, 111)
    idx.append(first)
    idx.close()
    # a crash in the middle of the second append
    with open(idx.path, "ab") as f:
        f.write(AbortedTxn(2, 112, 120, 121).to_bytes()[:torn])
    again = index(tmp_path)
    assert again.all_aborted_txns() == [first]
    assert again.torn_tail_bytes == torn
    assert again.path.stat().st_size == ENTRY_SIZE
    again.sanity_check()
    # the entry can be written again (segment recovery re-adds it) at an aligned position
    again.append(AbortedTxn(2, 112, 120, 121))
    again.close()
    assert len(index(tmp_path).all_aborted_txns()) == 2


def test_a_file_holding_only_a_torn_entry_becomes_empty(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path, BASE)
    path.write_bytes(b"\x00" * 20)
    idx = TransactionIndex(path, BASE)
    assert idx.entries == 0
    assert idx.torn_tail_bytes == 20
    assert path.stat().st_size == 0


def test_sanity_check_refuses_an_entry_ending_below_the_base_offset(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path, BASE)
    path.write_bytes(AbortedTxn(1, 50, 99, 100).to_bytes())
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, BASE).sanity_check()


def test_sanity_check_refuses_unknown_versions_and_disorder(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path, BASE)
    path.write_bytes(AbortedTxn(1, 100, 110, 111, version=1).to_bytes())
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, BASE).sanity_check()
    path.write_bytes(AbortedTxn(1, 100, 110, 111).to_bytes() + AbortedTxn(2, 100, 105, 111)
                     .to_bytes())
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, BASE).sanity_check()
    path.write_bytes(AbortedTxn(1, 120, 110, 111).to_bytes())
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, BASE).sanity_check()


def test_reset_delete_and_rename(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 100, 110, 111))
    idx.reset()
    assert idx.entries == 0
    assert idx.path.stat().st_size == 0
    idx.append(AbortedTxn(1, 100, 110, 111))
    new_path = idx.path.with_name(idx.path.name + ".deleted")
    idx.rename(new_path)
    assert new_path.exists()
    assert not txn_index_path(tmp_path, BASE).exists()
    assert idx.delete() is True
    assert not new_path.exists()
    assert idx.delete() is False


def test_rebuild_without_persisting_then_write_all(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 100, 110, 111))
    idx.reset()
    for i in range(3):
        idx.append(AbortedTxn(i, 100 + i * 10, 105 + i * 10, 106 + i * 10), persist=False)
    assert idx.path.stat().st_size == 0
    idx.write_all()
    assert idx.path.stat().st_size == 3 * ENTRY_SIZE
    assert len(index(tmp_path).all_aborted_txns()) == 3
