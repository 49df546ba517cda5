"""Transactions in the producer state (KIP-98, Kafka's ProducerAppendInfo rules): ongoing and
unreplicated transactions, the checks per AppendOrigin, snapshots keeping ongoing transactions,
expiry never dropping a producer in a transaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.protocol.records import build_batch, read_header
from odradek.storage.append_origin import AppendOrigin
from odradek.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.transaction_index import AbortedTxn

COMMIT = EndTransactionMarker(ControlRecordType.COMMIT, 0)
ABORT = EndTransactionMarker(ControlRecordType.ABORT, 0)


def data(pid: int, offset: int, seq: int, n: int = 1, epoch: int = 0, txn: bool = True):
    return read_header(build_batch([(None, b"v")] * n, base_offset=offset, timestamp_ms=1,
                                   producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                   is_transactional=txn))


def control(pid: int, offset: int, epoch: int = 0):
    return read_header(build_end_txn_marker_batch(COMMIT, pid, epoch, timestamp_ms=1,
                                                  base_offset=offset))


def test_a_transactional_batch_starts_a_transaction_and_a_marker_completes_it() -> None:
    psm = ProducerStateManager()
    assert psm.update(data(1, 0, 0, n=3)) is None
    assert psm.last_entry(1).current_txn_first_offset == 0
    assert psm.update(data(1, 3, 3)) is None  # same transaction: first offset unchanged
    assert psm.ongoing_txns == {0: 1}
    assert psm.first_unstable_offset() == 0
    completion = psm.update(control(1, 4), marker=ABORT)
    assert completion is not None
    assert completion.completed.first_offset == 0 and completion.completed.last_offset == 4
    assert completion.aborted_txn == AbortedTxn(1, 0, 4, 5)
    assert psm.ongoing_txns == {} and psm.last_entry(1).current_txn_first_offset == -1
    # unstable until the high watermark passes the marker
    assert psm.first_unstable_offset() == 0
    psm.on_high_watermark_updated(4)
    assert psm.first_unstable_offset() == 0
    psm.on_high_watermark_updated(5)
    assert psm.first_unstable_offset() is None


def test_abort_records_the_earliest_other_ongoing_transaction_as_its_lso() -> None:
    psm = ProducerStateManager()
    psm.update(data(1, 0, 0))
    psm.update(data(2, 1, 0))
    psm.update(data(3, 2, 0))
    completion = psm.update(control(3, 3), marker=ABORT)
    assert completion is not None and completion.aborted_txn == AbortedTxn(3, 2, 3, 0)
    commit = psm.update(control(1, 4), marker=COMMIT)
    assert commit is not None and commit.aborted_txn is None and commit.last_stable_offset == 1
    psm.on_high_watermark_updated(5)
    assert psm.first_unstable_offset() == 1  # producer 2 is still ongoing


def test_a_marker_without_a_transaction_completes_nothing_but_bumps_the_epoch() -> None:
    psm = ProducerStateManager()
    assert psm.update(control(7, 0, epoch=3), marker=ABORT) is None
    entry = psm.last_entry(7)
    assert entry.producer_epoch == 3 and entry.coordinator_epoch == 0
    assert psm.first_unstable_offset() is None
    # an emptied control batch (no marker) changes nothing
    assert psm.update(control(7, 1, epoch=4), marker=None) is None
    assert psm.last_entry(7).producer_epoch == 3


def test_client_non_transactional_batch_during_a_transaction_is_invalid_txn_state() -> None:
    psm = ProducerStateManager()
    psm.update(data(1, 0, 0))
    with pytest.raises(InvalidTxnStateError):
        psm.check(data(1, 1, 1, txn=False))
    with pytest.raises(InvalidTxnStateError):  # within one request too
        psm.check_batches([data(2, 0, 0), data(2, 1, 1, txn=False)])
    assert psm.check(data(1, 1, 1)) is None


def test_marker_checks_epoch_and_coordinator_epoch_unless_replicated() -> None:
    psm = ProducerStateManager()
    psm.update(data(1, 0, 0, epoch=2))
    psm.update(control(1, 1, epoch=2), marker=EndTransactionMarker(ControlRecordType.COMMIT, 5))
    coord = AppendOrigin.COORDINATOR
    with pytest.raises(InvalidProducerEpochError):
        psm.check_batches([control(1, 2, epoch=1)], origin=coord, markers=[ABORT])
    old_coordinator = EndTransactionMarker(ControlRecordType.ABORT, 4)
    with pytest.raises(TransactionCoordinatorFencedError):
        psm.check_batches([control(1, 2, epoch=2)], origin=coord, markers=[old_coordinator])
    same = EndTransactionMarker(ControlRecordType.ABORT, 5)
    assert psm.check_batches([control(1, 2, epoch=2)], origin=coord, markers=[same]) is None
    assert psm.check_batches([control(1, 2, epoch=1)], origin=AppendOrigin.REPLICATION,
                             markers=[old_coordinator]) is None


def test_coordinator_origin_checks_the_epoch_but_not_sequences() -> None:
    psm = ProducerStateManager()
    psm.update(data(1, 0, 0, epoch=1))
    coord = AppendOrigin.COORDINATOR
    assert psm.check_batches([data(1, 1, -1, epoch=1)], origin=coord) is None
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_batches([data(1, 1, 7, epoch=1)])
    with pytest.raises(InvalidProducerEpochError):
        psm.check_batches([data(1, 1, -1, epoch=0)], origin=coord)


def test_snapshot_keeps_ongoing_transactions_and_coordinator_epoch(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.update(data(1, 0, 0, n=2))
    psm.update(data(2, 2, 0, txn=False))
    psm.update(data(3, 3, 0))
    psm.update(control(3, 4), marker=EndTransactionMarker(ControlRecordType.COMMIT, 9))
    psm.update_map_end_offset(5)
    psm.take_snapshot()
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_latest_snapshot(0, 5) == 5
    assert loaded.ongoing_txns == {0: 1}
    assert loaded.unreplicated_txns == {}
    assert loaded.first_unstable_offset() == 0
    assert loaded.last_entry(3).coordinator_epoch == 9


def test_expiry_never_drops_a_producer_with_an_ongoing_transaction() -> None:
    psm = ProducerStateManager(producer_id_expiration_ms=10)
    psm.update(data(1, 0, 0))
    psm.update(data(2, 1, 0, txn=False))
    assert psm.remove_expired_producers(now_ms=1_000) == 1
    assert psm.last_entry(1) is not None and psm.last_entry(2) is None
    assert psm.first_unstable_offset() == 0


def test_truncate_fully_forgets_transactions() -> None:
    psm = ProducerStateManager()
    psm.update(data(1, 0, 0))
    psm.update(data(2, 1, 0))
    psm.update(control(2, 2), marker=ABORT)
    psm.truncate_fully_and_start_at(10)
    assert psm.ongoing_txns == {} and psm.unreplicated_txns == {}
    assert psm.first_unstable_offset() is None
