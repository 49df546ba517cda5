"""The log cleaner's transaction decisions (storage/cleaned_transaction_metadata.py), pure:
Kafka 2.8's CleanedTransactionMetadata, shouldDiscardBatch and checkBatchRetention, on
hand-written batch sequences."""

from __future__ import annotations

from odradek.protocol.control_records import ControlRecordType
from odradek.protocol.records import BatchHeader
from odradek.storage.cleaned_transaction_metadata import (
    BatchRetention,
    CleanedTransactionMetadata,
    LastRecord,
    batch_retention,
    is_batch_last_record_of_producer,
    overlapping,
    should_discard_batch,
)
from odradek.storage.transaction_index import AbortedTxn

ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def batch(offset: int, pid: int = -1, *, txn: bool = False, control: bool = False,
          count: int = 1, epoch: int = 0) -> BatchHeader:
    attributes = (0x10 if txn or control else 0) | (0x20 if control else 0)
    return BatchHeader(offset, 49 + 10 * count, 0, 2, 0, attributes, max(count - 1, 0), 0, 0,
                       pid, epoch if pid >= 0 else -1, -1 if control else 0, count)


def test_aborted_batches_are_discarded_until_their_marker_which_stays_with_an_index_entry(
        ) -> None:
    txn = AbortedTxn(producer_id=1, first_offset=1, last_offset=3, last_stable_offset=4)
    meta = CleanedTransactionMetadata.of([txn])
    assert meta.on_batch_read(batch(0, 1, txn=True)) is False  # before the aborted range
    assert meta.on_batch_read(batch(1, 1, txn=True)) is True
    assert meta.on_batch_read(batch(2, 2, txn=True)) is False  # another producer's txn
    assert meta.on_batch_read(batch(2, -1)) is False  # not transactional
    # data of the txn was read in this pass: the marker stays and goes into the cleaned index
    assert meta.on_control_batch_read(batch(3, 1, control=True), ABORT) is False
    assert meta.take_retained_aborted() == [txn]
    assert meta.take_retained_aborted() == []
    # after the marker, the producer's next transaction is not aborted
    assert meta.on_batch_read(batch(5, 1, txn=True)) is False


def test_an_abort_marker_whose_data_is_gone_may_go_and_is_not_indexed() -> None:
    txn = AbortedTxn(1, 1, 3, 4)
    meta = CleanedTransactionMetadata.of([txn])
    assert meta.on_control_batch_read(batch(3, 1, control=True), ABORT) is True
    assert meta.take_retained_aborted() == []
    # the marker still stays while its segment is newer than the delete horizon
    meta = CleanedTransactionMetadata.of([txn])
    assert should_discard_batch(batch(3, 1, control=True), ABORT, meta,
                                retain_txn_markers=True) is False
    meta = CleanedTransactionMetadata.of([txn])
    assert should_discard_batch(batch(3, 1, control=True), ABORT, meta,
                                retain_txn_markers=False) is True


def test_a_commit_marker_stays_while_a_batch_of_its_transaction_was_read() -> None:
    meta = CleanedTransactionMetadata()
    assert meta.on_batch_read(batch(0, 1, txn=True)) is False
    assert meta.on_control_batch_read(batch(1, 1, control=True), COMMIT) is False
    # the next commit of the producer with no data read in between may go
    assert meta.on_control_batch_read(batch(2, 1, control=True), COMMIT) is True
    # an emptied control batch may always go; an unknown control type always stays
    assert meta.on_control_batch_read(batch(3, 1, control=True, count=0), None) is True
    assert meta.on_control_batch_read(batch(4, 1, control=True),
                                      ControlRecordType.UNKNOWN) is False


def test_interleaved_producers_and_a_transaction_given_twice() -> None:
    a = AbortedTxn(1, 0, 4, 0)  # LSO held by producer 2's open txn
    b = AbortedTxn(2, 1, 6, 7)
    meta = CleanedTransactionMetadata.of([b, a, a])  # any order, duplicates count once
    meta.add_aborted_transactions([a])
    seen = [meta.on_batch_read(batch(0, 1, txn=True)), meta.on_batch_read(batch(1, 2, txn=True)),
            meta.on_batch_read(batch(2, 3, txn=True)), meta.on_batch_read(batch(3, 1, txn=True))]
    assert seen == [True, True, False, True]
    assert meta.on_control_batch_read(batch(4, 1, control=True), ABORT) is False
    assert meta.on_batch_read(batch(5, 2, txn=True)) is True
    assert meta.on_control_batch_read(batch(6, 2, control=True), ABORT) is False
    assert meta.on_control_batch_read(batch(7, 3, control=True), COMMIT) is False
    assert meta.take_retained_aborted() == [a, b]


def test_batch_retention_keeps_each_producers_last_batch_or_last_marker() -> None:
    last = {1: LastRecord(5, 0), 2: LastRecord(None, 3)}
    assert is_batch_last_record_of_producer(batch(5, 1, txn=True), last)
    assert not is_batch_last_record_of_producer(batch(4, 1, txn=True), last)
    assert is_batch_last_record_of_producer(batch(9, 2, control=True, epoch=3), last)
    assert not is_batch_last_record_of_producer(batch(9, 2, control=True, epoch=2), last)
    assert not is_batch_last_record_of_producer(batch(9, 2, txn=True, epoch=3), last)
    assert not is_batch_last_record_of_producer(batch(9, 7), last)
    # the last batch stays even when discarded (empty); others go or go when emptied
    assert batch_retention(batch(5, 1, txn=True), True, last) is BatchRetention.RETAIN_EMPTY
    assert batch_retention(batch(4, 1, txn=True), True, last) is BatchRetention.DELETE
    assert batch_retention(batch(4, 1, txn=True), False, last) is BatchRetention.DELETE_EMPTY
    assert batch_retention(batch(5, -1), False, last) is BatchRetention.DELETE_EMPTY


def test_overlapping_selects_by_marker_and_first_offset() -> None:
    txns = [AbortedTxn(1, 0, 2, 3), AbortedTxn(1, 4, 6, 7), AbortedTxn(2, 8, 9, 10)]
    assert overlapping(txns, 3, 8) == [txns[1]]
    assert overlapping(txns, 2, 9) == txns
    assert overlapping(txns, 10, 20) == []
